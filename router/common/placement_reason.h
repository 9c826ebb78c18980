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
  // The prefill computed by the decode engine itself: it held all but fewer
  // than placement.min_uncached_tokens of the prompt (B28, disaggregate auto).
  kLocalPrefill,
};
inline constexpr PlacementReason kPlacementReasons[] = {
    PlacementReason::kLeastLoaded, PlacementReason::kPrefixMatch, PlacementReason::kImbalance,
    PlacementReason::kSameWorker, PlacementReason::kLocalPrefill};
std::string_view PlacementReasonName(PlacementReason reason);

// Why a prompt had no token ids for placement (B27): it was placed least
// loaded instead (journal `placement_fallback`, metric
// narwhal_kv_tokenize_failures_total{reason}).
enum class TokenizeFailure {
  kUnsupported,  // a list of several prompts: no one prompt to place by
  kNoEngine,     // tokenizer "engine" and no engine in placement
  kTimeout,      // no answer within kv_events.tokenize_timeout_s
  kError,        // no usable answer (connection, status, body)
};
inline constexpr TokenizeFailure kTokenizeFailures[] = {
    TokenizeFailure::kUnsupported, TokenizeFailure::kNoEngine, TokenizeFailure::kTimeout,
    TokenizeFailure::kError};
std::string_view TokenizeFailureName(TokenizeFailure failure);

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_COMMON_PLACEMENT_REASON_H_
