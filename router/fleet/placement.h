// Placement: which engine takes a leg. Pure functions over a candidate list.
#ifndef NARWHAL_ROUTER_FLEET_PLACEMENT_H_
#define NARWHAL_ROUTER_FLEET_PLACEMENT_H_

#include <cstddef>
#include <optional>
#include <string_view>
#include <vector>

#include "router/common/placement_reason.h"

namespace narwhal::router {

struct Candidate {
  size_t index = 0;   // engine index in the fleet
  int inflight = 0;   // legs of this phase running on it now
  bool avoid = false; // placed only if no other candidate exists (B5: decode on its producer)
  // Cache-aware prefill only: leading prompt chunks its prefix index holds,
  // and the size of that index.
  size_t match = 0;
  size_t indexed = 0;
};


// When a prefix-matched engine counts as too loaded: it runs more than
// `absolute` legs beyond the least-loaded candidate AND more than `relative`
// times its legs.
struct ImbalanceLimit {
  int absolute = 8;
  double relative = 1.5;
};
bool Imbalanced(int matched_inflight, int least_inflight, const ImbalanceLimit& limit);

struct Choice {
  size_t pos = 0;  // position in the candidate list
  PlacementReason reason = PlacementReason::kLeastLoaded;
};

// Cache-aware placement: the candidate with the longest prefix match (ties:
// fewest in flight, then rotation), unless nothing matched or it is
// Imbalanced() against the least-loaded candidate; then the least loaded,
// ties going to the smallest index (the engine with the most room), then
// rotation. Candidates marked `avoid` count only when every one is.
// Nullopt if empty.
std::optional<Choice> ChooseCacheAware(const std::vector<Candidate>& candidates, size_t rotation,
                                       const ImbalanceLimit& limit);

// Least in-flight first among candidates not marked `avoid`, falling back to
// the avoided ones. Ties go to the first candidate at or after position
// `rotation % size` so equal engines share the load. Returns a position in
// `candidates`, or nullopt if empty.
std::optional<size_t> ChooseLeastLoaded(const std::vector<Candidate>& candidates, size_t rotation);

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_FLEET_PLACEMENT_H_
