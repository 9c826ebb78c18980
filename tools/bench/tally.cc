#include "tools/bench/tally.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace narwhal::bench {

void Tally::Merge(const Tally& other) {
  ok += other.ok;
  failed += other.failed;
  cut += other.cut;
  cut_waiting += other.cut_waiting;
  cut_connecting += other.cut_connecting;
  frames += other.frames;
  ttft_s.insert(ttft_s.end(), other.ttft_s.begin(), other.ttft_s.end());
  loop_lag_s.insert(loop_lag_s.end(), other.loop_lag_s.begin(), other.loop_lag_s.end());
  if (first_error.empty()) first_error = other.first_error;
}

double ProcessCpuSeconds(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return -1;
  const size_t paren = line.rfind(')');
  if (paren == std::string::npos || paren + 2 > line.size()) return -1;
  // Fields after the parenthesised command name start at field 3 (state);
  // utime and stime are fields 14 and 15, in clock ticks.
  std::istringstream rest(line.substr(paren + 2));
  std::string field;
  double utime = -1, stime = -1;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stod(field);
    if (i == 15) stime = std::stod(field);
  }
  if (utime < 0 || stime < 0) return -1;
  return (utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

double SelfCpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto secs = [](const timeval& tv) { return tv.tv_sec + tv.tv_usec / 1e6; };
  return secs(usage.ru_utime) + secs(usage.ru_stime);
}

double Meter::RelayCpu() const {
  if (pids_.empty()) return -1;
  double sum = 0;
  for (int pid : pids_) {
    const double s = ProcessCpuSeconds(pid);
    if (s < 0) return -1;
    sum += s;
  }
  return sum;
}

void Meter::Start() {
  relay_start_ = RelayCpu();
  self_start_ = SelfCpuSeconds();
  start_ = Clock::now();
}

void Meter::Stop() {
  wall_s_ = Seconds(Clock::now() - start_);
  self_cpu_s_ = SelfCpuSeconds() - self_start_;
  const double relay_end = RelayCpu();
  relay_cpu_s_ = relay_start_ >= 0 && relay_end >= 0 ? relay_end - relay_start_ : -1;
}

namespace {

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t idx = std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5));
  return v[idx];
}

}  // namespace

int Report(const Options& o, const Tally& t, const Meter& m, double drain_s) {
  const double wall = std::max(m.wall_s(), 1e-9);
  nlohmann::ordered_json r = {{"mode", o.mode_name},
                              {"api", o.chat ? "chat" : "completions"},
                              {"concurrency", o.concurrency},
                              {"threads", o.threads},
                              {"max_tokens", o.max_tokens},
                              {"prompt_words", o.prompt_words},
                              {"elapsed_s", wall},
                              {"requests_ok", t.ok},
                              {"requests_failed", t.failed},
                              {"requests_cut", t.cut},
                              {"cut_before_first_token", t.cut_waiting},
                              {"cut_while_connecting", t.cut_connecting},
                              {"frames", t.frames},
                              {"frames_per_s", t.frames / wall},
                              {"ttft_samples", t.ttft_s.size()},
                              {"ttft_p50_ms", Percentile(t.ttft_s, 0.50) * 1000},
                              {"ttft_p90_ms", Percentile(t.ttft_s, 0.90) * 1000},
                              {"ttft_p99_ms", Percentile(t.ttft_s, 0.99) * 1000},
                              {"bench_cpu_s", m.self_cpu_s()},
                              {"bench_cpu_share", m.self_cpu_s() / wall},
                              {"drain_s", drain_s}};
  if (!t.loop_lag_s.empty()) {
    r["loop_lag_p99_ms"] = Percentile(t.loop_lag_s, 0.99) * 1000;
    r["loop_lag_max_ms"] = Percentile(t.loop_lag_s, 1.0) * 1000;
  }
  if (m.relay_cpu_s() >= 0) {
    r["relay_cpu_s"] = m.relay_cpu_s();
    r["relay_cpu_share"] = m.relay_cpu_s() / wall;
    r["frames_per_relay_cpu_s"] = m.relay_cpu_s() > 0 ? t.frames / m.relay_cpu_s() : 0;
  }
  r["first_error"] = t.first_error;
  const int code = t.failed == 0 && (t.ok > 0 || t.frames > 0) ? 0 : 1;
  if (o.json_out) {
    std::cout << r.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << std::endl;
    return code;
  }
  std::printf("%s (%s) c=%d threads=%d: ok=%lld failed=%lld cut=%lld frames=%lld (%.0f/s)\n",
              o.mode_name.c_str(), o.chat ? "chat" : "completions", o.concurrency, o.threads, t.ok,
              t.failed, t.cut, t.frames, t.frames / wall);
  if (t.cut > 0) {
    std::printf("  cut: %lld before their first token (%lld while connecting)\n", t.cut_waiting,
                t.cut_connecting);
  }
  std::printf("  ttft p50=%.2fms p90=%.2fms p99=%.2fms (%zu samples)\n",
              r["ttft_p50_ms"].get<double>(), r["ttft_p90_ms"].get<double>(),
              r["ttft_p99_ms"].get<double>(), t.ttft_s.size());
  if (m.relay_cpu_s() >= 0) {
    std::printf("  relay cpu=%.2fs (%.0f%% of a core) frames per relay cpu-second=%.0f\n",
                m.relay_cpu_s(), 100 * m.relay_cpu_s() / wall,
                r["frames_per_relay_cpu_s"].get<double>());
  }
  std::printf("  bench cpu=%.2fs (%.0f%% of a core)", m.self_cpu_s(), 100 * m.self_cpu_s() / wall);
  if (!t.loop_lag_s.empty()) {
    std::printf(" loop lag p99=%.2fms max=%.2fms", r["loop_lag_p99_ms"].get<double>(),
                r["loop_lag_max_ms"].get<double>());
  }
  std::printf("\n");
  if (!t.first_error.empty()) std::printf("  first error: %s\n", t.first_error.c_str());
  return code;
}

}  // namespace narwhal::bench
