// The two OpenAI endpoints narwhal routes, and shared time types.
#ifndef NARWHAL_ENGINES_API_H_
#define NARWHAL_ENGINES_API_H_

#include <chrono>
#include <string>
#include <string_view>

namespace narwhal::engines {

// Monotonic time: deadlines, timers and latencies never use wall time.
using MonoClock = std::chrono::steady_clock;
using MonoTime = MonoClock::time_point;

enum class Api { kCompletions, kChatCompletions };

// "/v1/completions" or "/v1/chat/completions".
std::string_view ApiPath(Api api);
// "completions" or "chat" (metrics label, journal `api`).
std::string_view ApiLabel(Api api);

// Splits "http://host:port" or "https://host:port" (an engine base URL)
// into host and port. False if malformed.
bool ParseEngineUrl(const std::string& url, std::string* host, int* port);
// True when the engine base URL is https:// (the engine is reached over TLS,
// engines/http/tls_client.h).
bool IsTlsEngineUrl(std::string_view url);

// Seconds as a double, for journal fields and detail strings.
inline double Seconds(MonoClock::duration d) { return std::chrono::duration<double>(d).count(); }
inline MonoClock::duration FromSeconds(double s) {
  return std::chrono::duration_cast<MonoClock::duration>(std::chrono::duration<double>(s));
}

}  // namespace narwhal::engines

#endif  // NARWHAL_ENGINES_API_H_
