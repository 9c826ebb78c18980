// Resource figures of a process from /proc: resident memory, threads and
// open descriptors, sampled over a run.
#ifndef NARWHAL_TESTS_SOAK_PROC_STATS_H_
#define NARWHAL_TESTS_SOAK_PROC_STATS_H_

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace narwhal::soak {

struct ProcStats {
  bool alive = false;
  long rss_kb = 0;   // VmRSS
  int threads = 0;   // entries of /proc/PID/task
  int fds = 0;       // entries of /proc/PID/fd
};

ProcStats ReadProcStats(pid_t pid);

// The process's threads by name (/proc/PID/task/*/comm).
std::map<std::string, int> ThreadNames(pid_t pid);
// "name=count ...".
std::string FormatThreadNames(const std::map<std::string, int>& names);

struct ProcSample {
  absl::Duration at;  // since the start of the loaded run
  ProcStats stats;
};

// Median RSS of the samples taken in [from, to]; 0 when there is none.
long MedianRssKb(const std::vector<ProcSample>& samples, absl::Duration from,
                 absl::Duration to);
// Largest RSS of all samples.
long PeakRssKb(const std::vector<ProcSample>& samples);

}  // namespace narwhal::soak

#endif  // NARWHAL_TESTS_SOAK_PROC_STATS_H_
