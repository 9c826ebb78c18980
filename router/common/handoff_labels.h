// The bounded label values of the abandoned-handoff metrics
// (narwhal_handoffs_abandoned_total{reason},
// narwhal_handoff_releases_total{outcome}), exported at zero from the start.
#ifndef NARWHAL_ROUTER_COMMON_HANDOFF_LABELS_H_
#define NARWHAL_ROUTER_COMMON_HANDOFF_LABELS_H_

#include <array>
#include <cstddef>
#include <string_view>

namespace narwhal::router {

// Why the router holds a valid handoff it will not decode.
enum class AbandonReason {
  kCancelled,        // the client went away after the prefill
  kDeadline,         // the request deadline passed after the prefill
  kExpired,          // older than serving.handoff_timeout_s at decode dispatch
  kNoConsumer,       // no consumer placeable after the prefill
  kConsumerRefused,  // the consumer refused it before admission, or never got it
};
inline constexpr std::array<std::string_view, 5> kAbandonReasonNames = {
    "cancelled", "deadline", "expired", "no_consumer", "consumer_refused"};
inline std::string_view AbandonReasonName(AbandonReason r) {
  return kAbandonReasonNames[static_cast<size_t>(r)];
}

// How the release of one abandoned handoff ended.
enum class ReleaseOutcome {
  kReleased,    // a consumer pulled it (a one-token decode completed)
  kRejected,    // a consumer refused the rejection request before admission
  kFailed,      // the release leg failed otherwise (the lease frees the blocks)
  kTimeout,     // the release leg took longer than handoff.release_timeout_s
  kDropped,     // handoff.release_max_inflight releases were already running
  kNoConsumer,  // no consumer other than the producer to release through
  kLeaseEnded,  // the producer's lease had already ended (nothing to free)
  kOff,         // handoff.release is "off"
  kCancelled,   // the router shut down during the release
};
inline constexpr std::array<std::string_view, 9> kReleaseOutcomeNames = {
    "released",    "rejected",    "failed", "timeout",  "dropped",
    "no_consumer", "lease_ended", "off",    "cancelled"};
inline std::string_view ReleaseOutcomeName(ReleaseOutcome o) {
  return kReleaseOutcomeNames[static_cast<size_t>(o)];
}

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_COMMON_HANDOFF_LABELS_H_
