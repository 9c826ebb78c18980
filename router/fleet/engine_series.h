// EngineSeries: the Prometheus series of one engine — its breaker, hold and
// placement gauges, its in-flight gauges, its attempt-failure, ejection,
// probe, readmission and recompute counters — made when the engine joins
// (every label combination at zero, so that increase() sees the first
// event) and removed when it has left the fleet (B23), unless another
// incarnation of the same iid is still a member: incarnations share
// series.
//
// Only the fleet's owner touches these (under its lock): requests keep
// their per-engine load in EngineRecord's atomics, and the owner copies it
// to the in-flight gauges whenever it publishes (before every scrape).
#ifndef NARWHAL_ROUTER_FLEET_ENGINE_SERIES_H_
#define NARWHAL_ROUTER_FLEET_ENGINE_SERIES_H_

#include <array>
#include <cstddef>
#include <iterator>

#include "engines/engine_failure.h"
#include "router/common/metrics.h"
#include "router/common/settings.h"

namespace narwhal::router {

struct EngineSeries {
  std::array<prometheus::Gauge*, engines::kBreakerClassCount> streak{};
  prometheus::Gauge* quarantined = nullptr;
  prometheus::Gauge* in_placement = nullptr;
  prometheus::Gauge* held_timed = nullptr;
  prometheus::Gauge* held_inference = nullptr;
  // [prefill, decode]; null for a phase the engine's role does not run.
  std::array<prometheus::Gauge*, 2> inflight{};
  static constexpr size_t kReasons = std::size(engines::kFailureReasons);
  std::array<std::array<prometheus::Counter*, kReasons>, 2> attempt_failures{};
  // Null unless the engine decodes.
  prometheus::Counter* recompute_suspected = nullptr;

  // The engine's series (all null without metrics).
  static EngineSeries Create(Metrics* metrics, const EngineSettings& engine);
  // Removes every series of `engine` from the registry.
  static void Remove(Metrics* metrics, const EngineSettings& engine);

  prometheus::Counter* AttemptFailures(engines::Phase phase, engines::FailureReason reason) const;
};

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_FLEET_ENGINE_SERIES_H_
