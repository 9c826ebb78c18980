#include "engines/http/cpu_limit.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

namespace narwhal::engines {
namespace {

// The whitespace-separated words of `text`.
std::vector<std::string_view> Words(std::string_view text) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && (text[i] == ' ' || text[i] == '\n' || text[i] == '\t')) ++i;
    const size_t start = i;
    while (i < text.size() && text[i] != ' ' && text[i] != '\n' && text[i] != '\t') ++i;
    if (i > start) out.push_back(text.substr(start, i - start));
  }
  return out;
}

std::optional<int64_t> ParseInt(std::string_view word) {
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(word.data(), word.data() + word.size(), v);
  if (ec != std::errc() || end != word.data() + word.size()) return std::nullopt;
  return v;
}

// quota / period rounded up, at least 1; nullopt unless both are > 0.
std::optional<int> Cpus(std::optional<int64_t> quota, std::optional<int64_t> period) {
  if (!quota || !period || *quota <= 0 || *period <= 0) return std::nullopt;
  const int64_t cpus = *quota / *period + (*quota % *period != 0 ? 1 : 0);
  return static_cast<int>(std::clamp<int64_t>(cpus, 1, 1 << 20));
}

std::optional<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::optional<int> Min(std::optional<int> a, std::optional<int> b) {
  if (!a) return b;
  if (!b) return a;
  return std::min(*a, *b);
}

// The cgroup v2 path of the process ("0::PATH" in /proc/self/cgroup), "/"
// when there is none (e.g. a cgroup namespace shows "/").
std::string UnifiedPath(std::string_view proc_self_cgroup) {
  std::istringstream lines{std::string(proc_self_cgroup)};
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("0::", 0) == 0 && line.size() > 3 && line[3] == '/') return line.substr(3);
  }
  return "/";
}

}  // namespace

std::optional<int> CpuLimitFromCpuMax(std::string_view cpu_max) {
  const std::vector<std::string_view> words = Words(cpu_max);
  if (words.size() != 2 || words[0] == "max") return std::nullopt;
  return Cpus(ParseInt(words[0]), ParseInt(words[1]));
}

std::optional<int> CpuLimitFromCfs(std::string_view quota_us, std::string_view period_us) {
  const std::vector<std::string_view> quota = Words(quota_us);
  const std::vector<std::string_view> period = Words(period_us);
  if (quota.size() != 1 || period.size() != 1) return std::nullopt;
  return Cpus(ParseInt(quota[0]), ParseInt(period[0]));
}

std::optional<int> ContainerCpuLimit(const std::string& root, std::string_view proc_self_cgroup) {
  // cgroup v2: the process's cgroup and each parent up to the mount.
  std::string path = UnifiedPath(proc_self_cgroup);
  std::optional<int> limit;
  bool unified = false;
  while (true) {
    if (std::optional<std::string> max = ReadFile(root + path + (path == "/" ? "" : "/") +
                                                  "cpu.max")) {
      unified = true;
      limit = Min(limit, CpuLimitFromCpuMax(*max));
    }
    if (path == "/" || path.empty()) break;
    path = path.substr(0, path.rfind('/'));
    if (path.empty()) path = "/";
  }
  if (unified || ReadFile(root + "/cgroup.controllers")) return limit;
  // cgroup v1: the cpu controller's mount (a container sees its own cgroup).
  for (const char* dir : {"/cpu/", "/cpu,cpuacct/"}) {
    const std::optional<std::string> quota = ReadFile(root + dir + "cpu.cfs_quota_us");
    const std::optional<std::string> period = ReadFile(root + dir + "cpu.cfs_period_us");
    if (quota && period) return CpuLimitFromCfs(*quota, *period);
  }
  return std::nullopt;
}

std::optional<int> ContainerCpuLimit() {
  return ContainerCpuLimit("/sys/fs/cgroup", ReadFile("/proc/self/cgroup").value_or(""));
}

int ThreadsPerCore(unsigned hardware_threads, std::optional<int> cpu_limit) {
  const int cores = static_cast<int>(std::clamp(hardware_threads, 1u, 1u << 20));
  return cpu_limit ? std::clamp(*cpu_limit, 1, cores) : cores;
}

int ThreadsPerCore() {
  return ThreadsPerCore(std::thread::hardware_concurrency(), ContainerCpuLimit());
}

}  // namespace narwhal::engines
