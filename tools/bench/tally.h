// What a load run counts, and the CPU meters read at the edges of its
// measurement window.
#ifndef NARWHAL_TOOLS_BENCH_TALLY_H_
#define NARWHAL_TOOLS_BENCH_TALLY_H_

#include <atomic>
#include <chrono>
#include <string>
#include <vector>

#include "tools/bench/options.h"

namespace narwhal::bench {

using Clock = std::chrono::steady_clock;

inline double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Owned by one worker (no locking); merged once the run is over.
struct Tally {
  long long ok = 0;
  long long failed = 0;
  long long cut = 0;             // in flight when the window ended
  long long cut_waiting = 0;     // ... before their first generated token
  long long cut_connecting = 0;  // ... while connecting (HTTP modes)
  long long frames = 0;          // generated-token frames received inside the window
  std::vector<double> ttft_s;
  std::vector<double> loop_lag_s;
  std::string first_error;

  void Fail(const std::string& error) {
    ++failed;
    if (first_error.empty()) first_error = error;
  }
  void Merge(const Tally& other);
};

// The window shared by every worker: when it ends, `stopping` turns true and
// nothing more is counted.
struct Window {
  Clock::time_point start;
  Clock::time_point end;
  std::atomic<bool> stopping{false};
  std::atomic<long long> next_request{0};
  bool open() const { return !stopping.load(std::memory_order_relaxed); }
};

// utime + stime of a process in seconds (all its threads), or -1.
double ProcessCpuSeconds(int pid);
// This process's own CPU seconds (user + system, all threads).
double SelfCpuSeconds();

// CPU of the relay processes and of this process over the window.
class Meter {
 public:
  explicit Meter(std::vector<int> pids) : pids_(std::move(pids)) {}
  void Start();
  void Stop();
  double wall_s() const { return wall_s_; }
  double self_cpu_s() const { return self_cpu_s_; }
  // -1 without --pid, or when a relay process vanished.
  double relay_cpu_s() const { return relay_cpu_s_; }

 private:
  double RelayCpu() const;
  std::vector<int> pids_;
  Clock::time_point start_;
  double self_start_ = 0, relay_start_ = -1;
  double wall_s_ = 0, self_cpu_s_ = 0, relay_cpu_s_ = -1;
};

// Prints the run's report (text or one JSON line) and returns the exit code.
int Report(const Options& o, const Tally& t, const Meter& m, double drain_s);

}  // namespace narwhal::bench

#endif  // NARWHAL_TOOLS_BENCH_TALLY_H_
