// LoopPlacement: which event loop takes a new client connection.
//
// Every stream of a connection runs on the loop that took it, so placement
// decides which threads wake for the relayed frames. Spreading connections
// over every loop in turn keeps each loop lightly loaded, and each relayed
// frame then wakes an idle thread on its own core; on two shared cores that
// cost 18% more router CPU per frame than one loop carrying the same streams
// (tests/bench/relay_vs_nginx.sh; README "Performance"). So by default
// (kPack) connections fill the loops in order: the first loop whose thread
// was busy under `busy_mark` of its time takes the connection, and only when
// every loop is over the mark does the least busy one take it. A loop's load
// is its busy fraction smoothed over about `smoothing` (an exponential
// average of the sample windows), so the burst of work when many streams
// start at once does not push connections onto another loop, while a load
// that stays over the mark does within about a second. A loop that took `burst` connections within
// one window takes no more in it (a burst of connections arrives faster than their load shows), so
// a burst spreads while load is still unknown. kSpread is round robin.
//
// Loads are measured from each loop thread's CPU time, read at the moment of
// a placement once a window has passed (no timer): the busy fraction of a
// window is its CPU time over its wall time. Pure logic: the caller passes the time and the CPU
// clocks, so tests drive it with numbers alone.
//
// Not thread-safe: IoLoops calls it under a mutex.
#ifndef NARWHAL_ENGINES_HTTP_LOOP_PLACEMENT_H_
#define NARWHAL_ENGINES_HTTP_LOOP_PLACEMENT_H_

#include <chrono>
#include <cstdint>
#include <vector>

namespace narwhal::engines {

enum class Placement { kPack, kSpread };

struct LoopPlacementOptions {
  Placement policy = Placement::kPack;
  double busy_mark = 0.5;  // of a loop thread's time, over a window
  int burst = 128;         // connections one loop takes within one window
  std::chrono::nanoseconds window = std::chrono::milliseconds(100);
  std::chrono::nanoseconds smoothing = std::chrono::seconds(1);  // time constant
};

class LoopPlacement {
 public:
  LoopPlacement(int loops, LoopPlacementOptions options);

  // The loop (0 .. loops-1) for a new connection at `now`; `cpu[i]` is loop
  // i's thread CPU time so far (read only when a window ended: pass a
  // function). `now` and the CPU times are in nanoseconds of any epoch.
  template <typename CpuOf>
  int Pick(int64_t now_ns, CpuOf cpu_of) {
    if (options_.policy == Placement::kSpread) return Spread();
    if (now_ns - sampled_at_ns_ >= options_.window.count()) {
      std::vector<int64_t> cpu(loops_.size());
      for (size_t i = 0; i < loops_.size(); ++i) cpu[i] = cpu_of(static_cast<int>(i));
      Sample(now_ns, cpu);
    }
    return Pack();
  }

  // The smoothed busy fraction of loop `i`, as of the last sample.
  double busy(int i) const { return loops_[i].busy; }

 private:
  struct Loop {
    int64_t cpu_ns = 0;  // at the last sample
    double busy = 0;
    int placed = 0;  // connections taken since the last sample
  };
  void Sample(int64_t now_ns, const std::vector<int64_t>& cpu);
  int Pack();
  int Spread();

  const LoopPlacementOptions options_;
  std::vector<Loop> loops_;
  int64_t sampled_at_ns_;
  bool sampled_ = false;
  unsigned next_ = 0;  // kSpread's turn
};

}  // namespace narwhal::engines

#endif  // NARWHAL_ENGINES_HTTP_LOOP_PLACEMENT_H_
