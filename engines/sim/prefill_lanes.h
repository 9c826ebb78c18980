// PrefillLanes: the simulated engine's prefill compute as `lanes` servers
// (0 = unlimited, every prefill runs at once). A prefill takes the lane that
// frees first and waits for it, so prefill time queues under load as on a
// compute-bound engine. Thread-safe.
#ifndef NARWHAL_ENGINES_SIM_PREFILL_LANES_H_
#define NARWHAL_ENGINES_SIM_PREFILL_LANES_H_

#include <mutex>
#include <vector>

#include "absl/time/time.h"

namespace narwhal::sim {

class PrefillLanes {
 public:
  explicit PrefillLanes(int lanes) : busy_until_(lanes > 0 ? lanes : 0, absl::InfinitePast()) {}

  // Books `cost` of compute starting at `now` or when a lane frees; returns
  // how long until it is done (queueing included).
  absl::Duration Book(absl::Time now, absl::Duration cost);

 private:
  std::mutex mu_;
  std::vector<absl::Time> busy_until_;
};

}  // namespace narwhal::sim

#endif  // NARWHAL_ENGINES_SIM_PREFILL_LANES_H_
