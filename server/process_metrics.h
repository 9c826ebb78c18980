// ProcessMetrics: the standard process_* series (the names Prometheus client
// libraries export) read from /proc/self at each scrape, and
// narwhal_build_info{version,commit} = 1.
//   process_cpu_seconds_total      user + system CPU time
//   process_resident_memory_bytes  resident set size
//   process_virtual_memory_bytes   virtual memory size
//   process_open_fds               open file descriptors
//   process_max_fds                the RLIMIT_NOFILE soft limit
//   process_start_time_seconds     start time, seconds since the Unix epoch
#ifndef NARWHAL_SERVER_PROCESS_METRICS_H_
#define NARWHAL_SERVER_PROCESS_METRICS_H_

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <mutex>
#include <optional>
#include <string>

namespace narwhal::server {

// One reading of /proc/self (nullopt fields when unreadable).
struct ProcessSample {
  std::optional<double> cpu_seconds;
  std::optional<double> resident_bytes;
  std::optional<double> virtual_bytes;
  std::optional<double> open_fds;
  std::optional<double> max_fds;
  std::optional<double> start_time_seconds;
};

// Parses /proc/<pid>/stat text (fields after the parenthesised command,
// which may itself hold spaces and parentheses), with the clock tick rate,
// the page size and /proc/stat's btime.
ProcessSample ParseProcStat(const std::string& stat, long ticks_per_second, long page_size,
                            double boot_time_seconds);
// Reads the running process.
ProcessSample ReadProcessSample();

class ProcessMetrics {
 public:
  ProcessMetrics(prometheus::Registry& registry, const std::string& version,
                 const std::string& commit);
  // Re-reads /proc/self into the series (before each scrape).
  void Refresh();

 private:
  std::mutex mu_;
  prometheus::Counter& cpu_;
  double cpu_reported_ = 0;
  prometheus::Gauge& resident_;
  prometheus::Gauge& virtual_;
  prometheus::Gauge& open_fds_;
  prometheus::Gauge& max_fds_;
  prometheus::Gauge& start_time_;
};

}  // namespace narwhal::server

#endif  // NARWHAL_SERVER_PROCESS_METRICS_H_
