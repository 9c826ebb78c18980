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
    case PlacementReason::kLocalPrefill:
      return "local_prefill";
  }
  return "least_loaded";
}

std::string_view TokenizeFailureName(TokenizeFailure failure) {
  switch (failure) {
    case TokenizeFailure::kUnsupported:
      return "unsupported";
    case TokenizeFailure::kNoEngine:
      return "no_engine";
    case TokenizeFailure::kTimeout:
      return "timeout";
    case TokenizeFailure::kError:
      return "error";
  }
  return "error";
}

}  // namespace narwhal::router
