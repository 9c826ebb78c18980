#include "tests/soak/proc_stats.h"

#include <dirent.h>
#include <signal.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace narwhal::soak {
namespace {

// Entries of a /proc directory, "." and ".." left out; -1 when unreadable.
int CountEntries(const std::string& path) {
  DIR* dir = opendir(path.c_str());
  if (dir == nullptr) return -1;
  int n = 0;
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++n;
  }
  closedir(dir);
  return n;
}

}  // namespace

ProcStats ReadProcStats(pid_t pid) {
  ProcStats stats;
  if (pid <= 0 || kill(pid, 0) != 0) return stats;
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    absl::string_view rest = line;
    if (absl::ConsumePrefix(&rest, "VmRSS:")) {
      rest = absl::StripAsciiWhitespace(rest);
      absl::ConsumeSuffix(&rest, "kB");
      if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(rest), &stats.rss_kb)) stats.rss_kb = 0;
    } else if (absl::ConsumePrefix(&rest, "State:")) {
      // A zombie still has a /proc entry but no memory.
      stats.alive = absl::StripAsciiWhitespace(rest).substr(0, 1) != "Z";
    }
  }
  stats.threads = CountEntries(absl::StrCat("/proc/", pid, "/task"));
  stats.fds = CountEntries(absl::StrCat("/proc/", pid, "/fd"));
  return stats;
}

std::map<std::string, int> ThreadNames(pid_t pid) {
  std::map<std::string, int> names;
  const std::string task = absl::StrCat("/proc/", pid, "/task");
  DIR* dir = opendir(task.c_str());
  if (dir == nullptr) return names;
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    std::ifstream comm(absl::StrCat(task, "/", entry->d_name, "/comm"));
    std::string name;
    std::getline(comm, name);
    ++names[name];
  }
  closedir(dir);
  return names;
}

std::string FormatThreadNames(const std::map<std::string, int>& names) {
  std::string out;
  for (const auto& [name, n] : names) absl::StrAppend(&out, out.empty() ? "" : " ", name, "=", n);
  return out;
}

long MedianRssKb(const std::vector<ProcSample>& samples, absl::Duration from,
                 absl::Duration to) {
  std::vector<long> rss;
  for (const ProcSample& s : samples) {
    if (s.at >= from && s.at <= to && s.stats.alive) rss.push_back(s.stats.rss_kb);
  }
  if (rss.empty()) return 0;
  std::sort(rss.begin(), rss.end());
  return rss[rss.size() / 2];
}

long PeakRssKb(const std::vector<ProcSample>& samples) {
  long peak = 0;
  for (const ProcSample& s : samples) peak = std::max(peak, s.stats.rss_kb);
  return peak;
}

}  // namespace narwhal::soak
