#include "router/common/placement_reason.h"

namespace narwhal::router {

std::string_view PlacementReasonName(PlacementReason reason) {
  switch (reason) {
    case PlacementReason::kLeastLoaded:
      return "least_loaded";
    case PlacementReason::kPrefixMatch:
      return "prefix_match";
    case PlacementReason::kImbalance:
      return "imbalance";
    case PlacementReason::kSameWorker:
      return "same_worker";
  }
  return "least_loaded";
}

}  // namespace narwhal::router
