// The CPU limit of the process's container, for the thread counts that
// default to "one per core" (serving.io_threads 0): a container limited to
// 1.5 CPUs on a 64-core node gets 2 threads, not 64.
//
// The limit is the cgroup's CPU bandwidth quota: cgroup v2 `cpu.max`
// ("QUOTA PERIOD", or "max PERIOD" for none), else cgroup v1
// `cpu.cfs_quota_us` / `cpu.cfs_period_us` (-1 for none); quota / period,
// rounded up, at least 1. The parsers take the files' contents so tests can
// feed them samples; ContainerCpuLimit() reads the files.
#ifndef NARWHAL_ENGINES_HTTP_CPU_LIMIT_H_
#define NARWHAL_ENGINES_HTTP_CPU_LIMIT_H_

#include <optional>
#include <string>
#include <string_view>

namespace narwhal::engines {

// CPUs a cgroup v2 `cpu.max` allows; nullopt for "max" (no limit) or text
// that is not "QUOTA PERIOD" with both > 0.
std::optional<int> CpuLimitFromCpuMax(std::string_view cpu_max);

// CPUs cgroup v1's cpu.cfs_quota_us and cpu.cfs_period_us allow; nullopt for
// a quota of -1 (no limit) or malformed contents.
std::optional<int> CpuLimitFromCfs(std::string_view quota_us, std::string_view period_us);

// The tightest CPU limit on this process under the cgroup mount `root`:
// cgroup v2's `cpu.max` of the process's cgroup (named by `proc_self_cgroup`,
// the contents of /proc/self/cgroup) and of each parent below `root`, else
// cgroup v1's cfs files under `root`/cpu (or `root`/cpu,cpuacct). nullopt when
// no file sets a limit.
std::optional<int> ContainerCpuLimit(const std::string& root, std::string_view proc_self_cgroup);
// The same for this process (/sys/fs/cgroup, /proc/self/cgroup).
std::optional<int> ContainerCpuLimit();

// "One per core": `hardware_threads` (at least 1), capped by `cpu_limit`.
int ThreadsPerCore(unsigned hardware_threads, std::optional<int> cpu_limit);
// The same for this process (std::thread::hardware_concurrency()).
int ThreadsPerCore();

}  // namespace narwhal::engines

#endif  // NARWHAL_ENGINES_HTTP_CPU_LIMIT_H_
