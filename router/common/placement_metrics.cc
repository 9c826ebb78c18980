#include "router/common/placement_metrics.h"

#include <string>

namespace narwhal::router {

PlacementMetrics::PlacementMetrics(prometheus::Registry& registry) {
  auto& decisions = prometheus::BuildCounter()
                        .Name("narwhal_placement_decisions_total")
                        .Help("Legs placed, by phase and placement reason.")
                        .Register(registry);
  for (int p = 0; p < 2; ++p) {
    const engines::Phase phase = p == 0 ? engines::Phase::kPrefill : engines::Phase::kDecode;
    for (size_t r = 0; r < kReasons; ++r) {
      decisions_[p][r] =
          &decisions.Add({{"phase", std::string(engines::PhaseName(phase))},
                          {"reason", std::string(PlacementReasonName(kPlacementReasons[r]))}});
    }
  }
  match_fraction_ = &prometheus::BuildHistogram()
                         .Name("narwhal_placement_prefix_match_ratio")
                         .Help(
                             "Share of a prefill's prompt found in the chosen producer's index: "
                             "bytes of its text (cache_aware placement) or its tokens (kv_events).")
                         .Register(registry)
                         .Add({}, prometheus::Histogram::BucketBoundaries{
                                      0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1});
  auto& tokenize = prometheus::BuildCounter()
                       .Name("narwhal_kv_tokenize_failures_total")
                       .Help("Prompts placed without token ids (least loaded instead), by reason.")
                       .Register(registry);
  for (size_t f = 0; f < std::size(kTokenizeFailures); ++f) {
    tokenize_failures_[f] =
        &tokenize.Add({{"reason", std::string(TokenizeFailureName(kTokenizeFailures[f]))}});
  }
}

void PlacementMetrics::CountTokenizeFailure(TokenizeFailure failure) {
  tokenize_failures_[static_cast<size_t>(failure)]->Increment();
}

void PlacementMetrics::CountDecision(engines::Phase phase, PlacementReason reason) {
  decisions_[phase == engines::Phase::kPrefill ? 0 : 1][static_cast<size_t>(reason)]->Increment();
}

void PlacementMetrics::ObserveMatchFraction(double fraction) { match_fraction_->Observe(fraction); }

}  // namespace narwhal::router
