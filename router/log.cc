#include "router/log.h"

#include <sys/time.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <string>

namespace narwhal::router {

void Log(LogLevel level, std::string_view message) {
  timeval tv{};
  gettimeofday(&tv, nullptr);
  tm utc{};
  gmtime_r(&tv.tv_sec, &utc);
  char stamp[64];
  std::snprintf(stamp, sizeof(stamp), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", utc.tm_year + 1900,
                utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec,
                static_cast<long>(tv.tv_usec / 1000));
  const char* name = level == LogLevel::kInfo ? "INFO" : level == LogLevel::kWarning ? "WARN" : "ERROR";
  std::string line = std::string(stamp) + " " + name + " " + std::string(message) + "\n";
  // One write per line keeps concurrent lines whole.
  (void)!::write(STDERR_FILENO, line.data(), line.size());
}

}  // namespace narwhal::router
