#include "router/common/log.h"

#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>
#include <string>

namespace narwhal::router {
namespace {

// Severity order (the enum keeps its original values).
int Rank(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return 0;
    case LogLevel::kInfo:
      return 1;
    case LogLevel::kWarning:
      return 2;
    case LogLevel::kError:
      return 3;
  }
  return 1;
}

struct LogSettings {
  std::atomic<int> min_rank{1};
  std::atomic<LogFormat> format{LogFormat::kText};
};

LogSettings& LogConfig() {
  static LogSettings settings;
  return settings;
}

std::string Stamp() {
  timeval tv{};
  gettimeofday(&tv, nullptr);
  tm utc{};
  gmtime_r(&tv.tv_sec, &utc);
  char stamp[64];
  std::snprintf(stamp, sizeof(stamp), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", utc.tm_year + 1900,
                utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec,
                static_cast<long>(tv.tv_usec / 1000));
  return stamp;
}

// A text field value: bare when it is a plain token, else JSON-quoted.
std::string TextValue(const nlohmann::json& v) {
  if (!v.is_string()) return v.dump();
  const std::string& s = v.get_ref<const std::string&>();
  bool bare = !s.empty();
  for (const char c : s) bare &= c > ' ' && c < 0x7f && c != '"' && c != '=';
  return bare ? s : v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void Write(LogLevel level, std::string_view message, const nlohmann::json* fields) {
  if (!LogEnabled(level)) return;
  static constexpr const char* kText[] = {"DEBUG", "INFO", "WARN", "ERROR"};
  static constexpr const char* kJson[] = {"debug", "info", "warn", "error"};
  const int rank = Rank(level);
  std::string line;
  if (LogConfig().format.load(std::memory_order_relaxed) == LogFormat::kJson) {
    nlohmann::json out = nlohmann::json::object();
    out["ts"] = Stamp();
    out["level"] = kJson[rank];
    out["msg"] = std::string(message);
    if (fields != nullptr && fields->is_object()) {
      for (const auto& [key, value] : fields->items()) {
        if (!out.contains(key)) out[key] = value;
      }
    }
    line = out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  } else {
    line = Stamp() + " " + kText[rank] + " " + std::string(message);
    if (fields != nullptr && fields->is_object()) {
      for (const auto& [key, value] : fields->items()) {
        if (value.is_null()) continue;
        line += " " + key + "=" + TextValue(value);
      }
    }
    line += "\n";
  }
  // One write per line keeps concurrent lines whole.
  (void)!::write(STDERR_FILENO, line.data(), line.size());
}

}  // namespace

void SetLogLevel(LogLevel min_level) { LogConfig().min_rank = Rank(min_level); }
void SetLogFormat(LogFormat format) { LogConfig().format = format; }

bool ParseLogLevel(std::string_view text, LogLevel* out) {
  if (text == "debug") {
    *out = LogLevel::kDebug;
  } else if (text == "info") {
    *out = LogLevel::kInfo;
  } else if (text == "warn" || text == "warning") {
    *out = LogLevel::kWarning;
  } else if (text == "error") {
    *out = LogLevel::kError;
  } else {
    return false;
  }
  return true;
}

bool ParseLogFormat(std::string_view text, LogFormat* out) {
  if (text == "text") {
    *out = LogFormat::kText;
  } else if (text == "json") {
    *out = LogFormat::kJson;
  } else {
    return false;
  }
  return true;
}

bool LogEnabled(LogLevel level) {
  return Rank(level) >= LogConfig().min_rank.load(std::memory_order_relaxed);
}

void Log(LogLevel level, std::string_view message) { Write(level, message, nullptr); }

void Log(LogLevel level, std::string_view message, const nlohmann::json& fields) {
  Write(level, message, &fields);
}

std::string LogSeconds(double s) {
  char buf[48];
  if (s == std::floor(s) && std::fabs(s) < 1e15) {
    std::snprintf(buf, sizeof buf, "%.0fs", s);
  } else {
    std::snprintf(buf, sizeof buf, "%.6gs", s);
  }
  return buf;
}

}  // namespace narwhal::router
