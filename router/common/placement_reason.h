// Why a leg went where it went: the placement reasons router/fleet/placement.h
// decides and router/common/placement_metrics.h counts.
#ifndef NARWHAL_ROUTER_COMMON_PLACEMENT_REASON_H_
#define NARWHAL_ROUTER_COMMON_PLACEMENT_REASON_H_

#include <string_view>

namespace narwhal::router {

// Why a leg went where it went (journal `*_placement`, metric label `reason`).
enum class PlacementReason {
  kLeastLoaded,  // fewest legs in flight (no prefix matched, or least_loaded policy)
  kPrefixMatch,  // the longest prefix match
  kImbalance,    // a prefix matched, but that engine was too loaded: least loaded instead
  kSameWorker,   // decode on its own producer, the only engine left (B5)
};
inline constexpr PlacementReason kPlacementReasons[] = {
    PlacementReason::kLeastLoaded, PlacementReason::kPrefixMatch, PlacementReason::kImbalance,
    PlacementReason::kSameWorker};
std::string_view PlacementReasonName(PlacementReason reason);

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_COMMON_PLACEMENT_REASON_H_
