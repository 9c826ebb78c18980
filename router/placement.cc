#include "router/placement.h"

namespace narwhal::router {

std::optional<size_t> ChooseLeastLoaded(const std::vector<Candidate>& candidates,
                                        size_t rotation) {
  const size_t n = candidates.size();
  if (n == 0) return std::nullopt;
  std::optional<size_t> best;
  for (size_t k = 0; k < n; ++k) {
    const size_t pos = (rotation + k) % n;
    const Candidate& c = candidates[pos];
    if (!best) {
      best = pos;
      continue;
    }
    const Candidate& b = candidates[*best];
    if (c.avoid != b.avoid) {
      if (!c.avoid) best = pos;
      continue;
    }
    if (c.inflight < b.inflight) best = pos;
  }
  return best;
}

}  // namespace narwhal::router
