#include "engines/http/loop_placement.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace narwhal::engines {

LoopPlacement::LoopPlacement(int loops, LoopPlacementOptions options)
    : options_(options),
      loops_(static_cast<size_t>(std::max(loops, 1))),
      sampled_at_ns_(std::numeric_limits<int64_t>::min() / 2) {}

void LoopPlacement::Sample(int64_t now_ns, const std::vector<int64_t>& cpu) {
  const int64_t wall = now_ns - sampled_at_ns_;
  // The weight of this window in the average: 1 - e^(-wall / smoothing).
  const double weight = options_.smoothing.count() <= 0
                            ? 1.0
                            : 1.0 - std::exp(-static_cast<double>(wall) /
                                             static_cast<double>(options_.smoothing.count()));
  for (size_t i = 0; i < loops_.size(); ++i) {
    Loop& loop = loops_[i];
    // The first sample only sets the baseline: no load is known yet.
    if (sampled_ && wall > 0) {
      const double window = std::clamp(static_cast<double>(cpu[i] - loop.cpu_ns) / wall, 0.0, 1.0);
      loop.busy += weight * (window - loop.busy);
    }
    loop.cpu_ns = cpu[i];
    loop.placed = 0;
  }
  sampled_at_ns_ = now_ns;
  sampled_ = true;
}

int LoopPlacement::Pack() {
  const auto open = [this](const Loop& loop) { return loop.placed < options_.burst; };
  int chosen = -1;
  // The first loop under the mark that has room in this window's burst.
  for (size_t i = 0; i < loops_.size() && chosen < 0; ++i) {
    if (loops_[i].busy < options_.busy_mark && open(loops_[i])) chosen = static_cast<int>(i);
  }
  // Else the least busy loop with room; else (every loop took its burst)
  // the one that took the fewest.
  const bool any_under_mark = chosen >= 0;
  for (size_t i = 0; i < loops_.size() && !any_under_mark; ++i) {
    if (open(loops_[i]) &&
        (chosen < 0 || loops_[i].busy < loops_[static_cast<size_t>(chosen)].busy)) {
      chosen = static_cast<int>(i);
    }
  }
  if (chosen < 0) {
    chosen = 0;
    for (size_t i = 1; i < loops_.size(); ++i) {
      if (loops_[i].placed < loops_[static_cast<size_t>(chosen)].placed) {
        chosen = static_cast<int>(i);
      }
    }
  }
  ++loops_[static_cast<size_t>(chosen)].placed;
  return chosen;
}

int LoopPlacement::Spread() { return static_cast<int>(next_++ % loops_.size()); }

}  // namespace narwhal::engines
