#include "server/runtime_tuning.h"

#include <atomic>
#include <chrono>
#include <string>

#include <absl/synchronization/mutex.h>
#include <google/protobuf/stubs/logging.h>

#include "server/log.h"

namespace narwhal::server {
namespace {

// Protobuf logs one line per undecodable client message (e.g. invalid UTF-8
// in a string field). A client must not be able to flood the log: at most
// one line per second, with the count of lines left out.
void RateLimitedProtobufLog(google::protobuf::LogLevel level, const char* filename, int line,
                            const std::string& message) {
  static std::atomic<long long> next_allowed_ms{0};
  static std::atomic<long long> suppressed{0};
  const long long now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::steady_clock::now().time_since_epoch())
                               .count();
  long long allowed = next_allowed_ms.load();
  if (now_ms < allowed || !next_allowed_ms.compare_exchange_strong(allowed, now_ms + 1000)) {
    suppressed.fetch_add(1);
    return;
  }
  const long long left_out = suppressed.exchange(0);
  std::string text = std::string("protobuf (") + filename + ":" + std::to_string(line) + "): " +
                     message;
  if (left_out > 0) text += " (" + std::to_string(left_out) + " similar lines left out)";
  Log(level >= google::protobuf::LOGLEVEL_ERROR ? LogLevel::kError : LogLevel::kWarning, text);
}

}  // namespace

void TuneRuntime() {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  google::protobuf::SetLogHandler(RateLimitedProtobufLog);
}

}  // namespace narwhal::server
