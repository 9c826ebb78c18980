#include "engines/sim/prefill_lanes.h"

#include <algorithm>

namespace narwhal::sim {

absl::Duration PrefillLanes::Book(absl::Time now, absl::Duration cost) {
  if (busy_until_.empty()) return cost;
  std::lock_guard<std::mutex> lock(mu_);
  auto lane = std::min_element(busy_until_.begin(), busy_until_.end());
  const absl::Time start = std::max(now, *lane);
  *lane = start + cost;
  return *lane - now;
}

}  // namespace narwhal::sim
