// Placement: which engine takes a leg. Pure functions over a candidate list.
#ifndef NARWHAL_ROUTER_PLACEMENT_H_
#define NARWHAL_ROUTER_PLACEMENT_H_

#include <cstddef>
#include <optional>
#include <vector>

namespace narwhal::router {

struct Candidate {
  size_t index = 0;   // engine index in the fleet
  int inflight = 0;   // legs of this phase running on it now
  bool avoid = false; // placed only if no other candidate exists (B5: decode on its producer)
};

// Least in-flight first among candidates not marked `avoid`, falling back to
// the avoided ones. Ties go to the first candidate at or after position
// `rotation % size` so equal engines share the load. Returns a position in
// `candidates`, or nullopt if empty.
std::optional<size_t> ChooseLeastLoaded(const std::vector<Candidate>& candidates, size_t rotation);

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_PLACEMENT_H_
