// Metrics: every Prometheus family narwhal exports (SPEC §8), registered on an
// injected registry. Label sets are bounded (engine ids from the config, fixed
// enums); never a request id. Families are created once; hot-path series are
// cached as references. Thread-safe (prometheus-cpp metrics are).
#ifndef NARWHAL_ROUTER_COMMON_METRICS_H_
#define NARWHAL_ROUTER_COMMON_METRICS_H_

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <string>

#include "router/common/placement_metrics.h"

namespace narwhal::router {

class Metrics {
 public:
  explicit Metrics(prometheus::Registry& registry);

  // Requests
  prometheus::Family<prometheus::Counter>& requests_total;  // {api, door, terminal}
  // Tenants (serving.api_keys; router/tenant_limits): the names are bounded
  // by the configuration.
  prometheus::Family<prometheus::Counter>& tenant_requests_total;   // {tenant, terminal}
  prometheus::Family<prometheus::Gauge>& tenant_inflight;           // {tenant}
  prometheus::Family<prometheus::Counter>& tenant_throttled_total;  // {tenant, limit}
  prometheus::Gauge& inflight;
  prometheus::Histogram& ttft_seconds;
  prometheus::Histogram& first_byte_seconds;
  prometheus::Histogram& prefill_seconds;
  prometheus::Histogram& handoff_seconds;  // first_byte - ttft
  prometheus::Histogram& duration_seconds;
  // Inter-token time of a completed request's decode (journal tpot_s).
  prometheus::Histogram& tpot_seconds;
  prometheus::Counter& decode_tokens_total;

  // Attempts and retries
  prometheus::Family<prometheus::Counter>& attempt_failures_total;  // {phase, reason, iid}
  prometheus::Counter& retry_attempts_total;
  prometheus::Counter& retry_denied_total;
  prometheus::Gauge& retry_credits;
  // Stream continuation (SPEC §15): continuations_total{outcome}.
  prometheus::Family<prometheus::Counter>& continuations_total;
  prometheus::Family<prometheus::Counter>& handoff_rejected_total;  // {reason}
  // Abandoned handoffs and their releases (router/handoff_releaser.h); every
  // label of router/common/handoff_labels.h exported at zero from the start.
  prometheus::Family<prometheus::Counter>& handoffs_abandoned_total;  // {reason}
  prometheus::Family<prometheus::Counter>& handoff_releases_total;    // {outcome}

  // Engines
  prometheus::Family<prometheus::Gauge>& engine_breaker_streak;        // {iid, class}
  prometheus::Family<prometheus::Gauge>& engine_held;                  // {iid, kind}
  prometheus::Family<prometheus::Gauge>& engine_quarantined;           // {iid}
  prometheus::Family<prometheus::Gauge>& engine_in_placement;          // {iid}
  prometheus::Family<prometheus::Counter>& engine_ejections_total;     // {iid, cause}
  prometheus::Family<prometheus::Counter>& engine_probes_total;        // {iid, kind, outcome}
  prometheus::Family<prometheus::Counter>& engine_readmissions_total;  // {iid, evidence}
  prometheus::Family<prometheus::Gauge>& engine_inflight;              // {iid, phase}

  // Placement: decisions_total{phase, reason}, prefix_match_ratio
  PlacementMetrics placement;
  // Links
  prometheus::Family<prometheus::Gauge>& link_held;  // {producer, consumer}
  // Crossed decodes whose consumer recomputed the prompt (router/fleet/kv_recompute.h)
  prometheus::Family<prometheus::Counter>& kv_recompute_suspected_total;  // {iid}

  // The live fleet (SPEC §13)
  prometheus::Family<prometheus::Gauge>& fleet_engines;               // {role, state}
  prometheus::Family<prometheus::Counter>& membership_changes_total;  // {source, change}
  prometheus::Family<prometheus::Counter>& config_reloads_total;      // {result}
  prometheus::Gauge& config_generation;
  prometheus::Family<prometheus::Counter>& discovery_lookups_total;  // {group, result}

  // KV events (SPEC §14, router/fleet/kv_subscriber.h)
  prometheus::Family<prometheus::Counter>& kv_events_total;      // {iid, kind}
  prometheus::Family<prometheus::Counter>& kv_event_gaps_total;  // {iid, outcome}
  prometheus::Family<prometheus::Gauge>& kv_index_blocks;        // {iid}
};

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_COMMON_METRICS_H_
