// The placement families: how each leg was placed, and how much of each
// prefill's prompt the chosen producer's prefix index held. Every
// {phase, reason} series exists (at 0) from the start.
#ifndef NARWHAL_ROUTER_COMMON_PLACEMENT_METRICS_H_
#define NARWHAL_ROUTER_COMMON_PLACEMENT_METRICS_H_

#include <prometheus/counter.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <array>

#include "engines/engine_failure.h"
#include "router/common/placement_reason.h"

namespace narwhal::router {

class PlacementMetrics {
 public:
  explicit PlacementMetrics(prometheus::Registry& registry);

  void CountDecision(engines::Phase phase, PlacementReason reason);
  // The matched share of the prompt (cache_aware: bytes of its text;
  // kv_events: its tokens).
  void ObserveMatchFraction(double fraction);
  void CountTokenizeFailure(TokenizeFailure failure);

 private:
  std::array<prometheus::Counter*, std::size(kTokenizeFailures)> tokenize_failures_{};
  static constexpr size_t kReasons = std::size(kPlacementReasons);
  std::array<std::array<prometheus::Counter*, kReasons>, 2> decisions_{};  // [phase][reason]
  prometheus::Histogram* match_fraction_ = nullptr;
};

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_COMMON_PLACEMENT_METRICS_H_
