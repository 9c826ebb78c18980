// Process logging: one event per line on stderr, with a level and a UTC
// timestamp ("2026-11-30T09:00:00.123Z INFO narwhal-serve: ready ...").
// Request contents are never logged. One write per line keeps concurrent
// lines whole.
#ifndef NARWHAL_ROUTER_LOG_H_
#define NARWHAL_ROUTER_LOG_H_

#include <string_view>

namespace narwhal::router {

enum class LogLevel { kInfo, kWarning, kError };

void Log(LogLevel level, std::string_view message);
inline void LogInfo(std::string_view m) { Log(LogLevel::kInfo, m); }
inline void LogWarning(std::string_view m) { Log(LogLevel::kWarning, m); }
inline void LogError(std::string_view m) { Log(LogLevel::kError, m); }

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_LOG_H_
