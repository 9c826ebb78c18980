// Process logging: one event per line on stderr, with a level and a UTC
// timestamp ("2026-11-30T09:00:00.123Z INFO narwhal-serve: ready ..."), or,
// in the json format, one JSON object per line
// ({"ts":"2026-11-30T09:00:00.123Z","level":"info","msg":"...",<fields>}).
// Lines below the minimum level (default info) are dropped. Request
// contents are never logged. One write per line keeps concurrent lines
// whole.
#ifndef NARWHAL_ROUTER_COMMON_LOG_H_
#define NARWHAL_ROUTER_COMMON_LOG_H_

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>

namespace narwhal::router {

enum class LogLevel { kInfo, kWarning, kError, kDebug };
enum class LogFormat { kText, kJson };

// Process-wide log settings (set once, at start-up, before threads start).
void SetLogLevel(LogLevel min_level);
void SetLogFormat(LogFormat format);
// "debug", "info", "warn" (or "warning"), "error"; false for anything else.
bool ParseLogLevel(std::string_view text, LogLevel* out);
// "text" or "json".
bool ParseLogFormat(std::string_view text, LogFormat* out);
bool LogEnabled(LogLevel level);

void Log(LogLevel level, std::string_view message);
// With structured fields (a JSON object): the text format appends them as
// key=value pairs, the json format merges them into the line's object.
void Log(LogLevel level, std::string_view message, const nlohmann::json& fields);
inline void LogDebug(std::string_view m) { Log(LogLevel::kDebug, m); }
inline void LogInfo(std::string_view m) { Log(LogLevel::kInfo, m); }
inline void LogWarning(std::string_view m) { Log(LogLevel::kWarning, m); }
inline void LogError(std::string_view m) { Log(LogLevel::kError, m); }

// A duration for a log line: "15s", "0.25s", "3600s" (whole seconds as an
// integer, else up to 6 significant digits, no trailing zeros).
std::string LogSeconds(double s);

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_COMMON_LOG_H_
