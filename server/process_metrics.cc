#include "server/process_metrics.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <vector>

namespace narwhal::server {
namespace {

std::string ReadFile(const char* path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

double BootTime() {
  std::istringstream in(ReadFile("/proc/stat"));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("btime ", 0) == 0) return std::stod(line.substr(6));
  }
  return 0;
}

std::optional<double> OpenFds() {
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return std::nullopt;
  double n = 0;
  while (const dirent* e = ::readdir(dir)) {
    if (e->d_name[0] != '.') ++n;
  }
  ::closedir(dir);
  return n - 1;  // the directory stream's own descriptor
}

prometheus::Gauge& Gauge(prometheus::Registry& r, const std::string& name,
                         const std::string& help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(r).Add({});
}

}  // namespace

ProcessSample ParseProcStat(const std::string& stat, long ticks_per_second, long page_size,
                            double boot_time_seconds) {
  ProcessSample s;
  const size_t close = stat.rfind(')');
  if (close == std::string::npos || ticks_per_second <= 0) return s;
  // Fields from 3 (state) on; utime is field 14, stime 15, starttime 22,
  // vsize 23, rss 24 (proc(5)).
  std::istringstream in(stat.substr(close + 1));
  std::vector<std::string> f;
  for (std::string field; in >> field;) f.push_back(field);
  auto field = [&f](int n) -> std::optional<double> {
    const size_t at = static_cast<size_t>(n - 3);
    if (at >= f.size()) return std::nullopt;
    try {
      return std::stod(f[at]);
    } catch (...) {
      return std::nullopt;
    }
  };
  const auto utime = field(14), stime = field(15), start = field(22), vsize = field(23),
             rss = field(24);
  if (utime && stime) s.cpu_seconds = (*utime + *stime) / static_cast<double>(ticks_per_second);
  if (start && boot_time_seconds > 0) {
    s.start_time_seconds = boot_time_seconds + *start / static_cast<double>(ticks_per_second);
  }
  if (vsize) s.virtual_bytes = *vsize;
  if (rss) s.resident_bytes = *rss * static_cast<double>(page_size);
  return s;
}

ProcessSample ReadProcessSample() {
  ProcessSample s = ParseProcStat(ReadFile("/proc/self/stat"), ::sysconf(_SC_CLK_TCK),
                                  ::sysconf(_SC_PAGESIZE), BootTime());
  s.open_fds = OpenFds();
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0) s.max_fds = static_cast<double>(limit.rlim_cur);
  return s;
}

ProcessMetrics::ProcessMetrics(prometheus::Registry& registry, const std::string& version,
                               const std::string& commit)
    : cpu_(prometheus::BuildCounter()
               .Name("process_cpu_seconds_total")
               .Help("Total user and system CPU time spent in seconds.")
               .Register(registry)
               .Add({})),
      resident_(Gauge(registry, "process_resident_memory_bytes", "Resident memory size in bytes.")),
      virtual_(Gauge(registry, "process_virtual_memory_bytes", "Virtual memory size in bytes.")),
      open_fds_(Gauge(registry, "process_open_fds", "Number of open file descriptors.")),
      max_fds_(Gauge(registry, "process_max_fds", "Maximum number of open file descriptors.")),
      start_time_(Gauge(registry, "process_start_time_seconds",
                        "Start time of the process since the Unix epoch in seconds.")) {
  prometheus::BuildGauge()
      .Name("narwhal_build_info")
      .Help("Always 1; the labels name the running build's version and git commit.")
      .Register(registry)
      .Add({{"version", version}, {"commit", commit}})
      .Set(1);
  Refresh();
}

void ProcessMetrics::Refresh() {
  const ProcessSample s = ReadProcessSample();
  std::lock_guard<std::mutex> lock(mu_);
  if (s.cpu_seconds && *s.cpu_seconds > cpu_reported_) {
    cpu_.Increment(*s.cpu_seconds - cpu_reported_);
    cpu_reported_ = *s.cpu_seconds;
  }
  if (s.resident_bytes) resident_.Set(*s.resident_bytes);
  if (s.virtual_bytes) virtual_.Set(*s.virtual_bytes);
  if (s.open_fds) open_fds_.Set(*s.open_fds);
  if (s.max_fds) max_fds_.Set(*s.max_fds);
  if (s.start_time_seconds) start_time_.Set(*s.start_time_seconds);
}

}  // namespace narwhal::server
