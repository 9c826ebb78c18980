#include "router/common/metrics.h"

#include <string>

#include "router/common/handoff_labels.h"

namespace narwhal::router {
namespace {

using prometheus::Histogram;

// Latency buckets in seconds: sub-millisecond loopback to minute-long streams.
Histogram::BucketBoundaries LatencyBuckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300};
}

// Inter-token buckets in seconds: a fast decode's few milliseconds to a
// stalled one's seconds.
Histogram::BucketBoundaries TpotBuckets() {
  return {0.002, 0.005, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1, 2.5};
}

}  // namespace

Metrics::Metrics(prometheus::Registry& r)
    : requests_total(prometheus::BuildCounter()
                         .Name("narwhal_requests_total")
                         .Help("Client requests by API, front door and terminal outcome.")
                         .Register(r)),
      tenant_requests_total(prometheus::BuildCounter()
                                .Name("narwhal_tenant_requests_total")
                                .Help("Client requests by tenant (serving.api_keys) and terminal "
                                      "outcome.")
                                .Register(r)),
      tenant_inflight(prometheus::BuildGauge()
                          .Name("narwhal_tenant_inflight")
                          .Help("A tenant's requests admitted and not yet finished.")
                          .Register(r)),
      tenant_throttled_total(prometheus::BuildCounter()
                                 .Name("narwhal_tenant_throttled_total")
                                 .Help("Requests refused with 429 for a tenant's own limit "
                                       "(inflight: serving.api_keys[].max_inflight, rate: "
                                       "requests_per_s).")
                                 .Register(r)),
      inflight(prometheus::BuildGauge()
                   .Name("narwhal_inflight")
                   .Help("Client requests admitted and not yet finished.")
                   .Register(r)
                   .Add({})),
      ttft_seconds(prometheus::BuildHistogram()
                       .Name("narwhal_ttft_seconds")
                       .Help("Seconds from arrival until the producer finished the prefill "
                             "(journal ttft_s).")
                       .Register(r)
                       .Add({}, LatencyBuckets())),
      first_byte_seconds(prometheus::BuildHistogram()
                             .Name("narwhal_first_byte_seconds")
                             .Help("Seconds from arrival until the first generated output reached "
                                   "the client.")
                             .Register(r)
                             .Add({}, LatencyBuckets())),
      prefill_seconds(prometheus::BuildHistogram()
                          .Name("narwhal_prefill_seconds")
                          .Help("Seconds each successful prefill leg took.")
                          .Register(r)
                          .Add({}, LatencyBuckets())),
      handoff_seconds(prometheus::BuildHistogram()
                          .Name("narwhal_handoff_seconds")
                          .Help("Seconds from the end of the prefill to the first generated "
                                "output: KV transfer plus decode queueing.")
                          .Register(r)
                          .Add({}, LatencyBuckets())),
      duration_seconds(prometheus::BuildHistogram()
                           .Name("narwhal_request_duration_seconds")
                           .Help("Seconds from arrival until the response ended.")
                           .Register(r)
                           .Add({}, LatencyBuckets())),
      tpot_seconds(prometheus::BuildHistogram()
                       .Name("narwhal_tpot_seconds")
                       .Help("Seconds between generated tokens of each completed request with two "
                             "or more: the decode's time per output token after the first "
                             "(journal tpot_s).")
                       .Register(r)
                       .Add({}, TpotBuckets())),
      decode_tokens_total(prometheus::BuildCounter()
                              .Name("narwhal_decode_tokens_total")
                              .Help("Generated tokens relayed from decode engines.")
                              .Register(r)
                              .Add({})),
      attempt_failures_total(prometheus::BuildCounter()
                                 .Name("narwhal_attempt_failures_total")
                                 .Help("Failed engine legs by phase, reason and engine (iid).")
                                 .Register(r)),
      retry_attempts_total(prometheus::BuildCounter()
                               .Name("narwhal_retry_attempts_total")
                               .Help("Fresh attempts started after a transient failure.")
                               .Register(r)
                               .Add({})),
      retry_denied_total(prometheus::BuildCounter()
                             .Name("narwhal_retry_denied_total")
                             .Help("Retries refused because no retry credit remained.")
                             .Register(r)
                             .Add({})),
      retry_credits(prometheus::BuildGauge()
                        .Name("narwhal_retry_credits")
                        .Help("Credits left in the shared retry pool.")
                        .Register(r)
                        .Add({})),
      continuations_total(
          prometheus::BuildCounter()
              .Name("narwhal_continuations_total")
              .Help("Decodes that broke after output started, by what followed: continued, "
                    "refused, failed or no_budget.")
              .Register(r)),
      handoff_rejected_total(prometheus::BuildCounter()
                                 .Name("narwhal_handoff_rejected_total")
                                 .Help("KV handoffs not used for decode, by reason.")
                                 .Register(r)),
      handoffs_abandoned_total(
          prometheus::BuildCounter()
              .Name("narwhal_handoffs_abandoned_total")
              .Help("Valid KV handoffs the router held and did not decode, by reason.")
              .Register(r)),
      handoff_releases_total(
          prometheus::BuildCounter()
              .Name("narwhal_handoff_releases_total")
              .Help("Releases of abandoned KV handoffs on their producers, by outcome.")
              .Register(r)),
      engine_breaker_streak(prometheus::BuildGauge()
                                .Name("narwhal_engine_breaker_streak")
                                .Help("Consecutive failures per engine and failure class.")
                                .Register(r)),
      engine_held(prometheus::BuildGauge()
                      .Name("narwhal_engine_held")
                      .Help("1 while an engine is held out of placement, by hold kind.")
                      .Register(r)),
      engine_quarantined(prometheus::BuildGauge()
                             .Name("narwhal_engine_quarantined")
                             .Help("1 while an engine is under a timed quarantine.")
                             .Register(r)),
      engine_in_placement(prometheus::BuildGauge()
                              .Name("narwhal_engine_in_placement")
                              .Help("1 while an engine may receive new legs.")
                              .Register(r)),
      engine_ejections_total(prometheus::BuildCounter()
                                 .Name("narwhal_engine_ejections_total")
                                 .Help("Engine ejections by cause.")
                                 .Register(r)),
      engine_probes_total(prometheus::BuildCounter()
                              .Name("narwhal_engine_probes_total")
                              .Help("Readmission probes by kind and outcome.")
                              .Register(r)),
      engine_readmissions_total(prometheus::BuildCounter()
                                    .Name("narwhal_engine_readmissions_total")
                                    .Help("Engines returned to placement, by evidence.")
                                    .Register(r)),
      engine_inflight(prometheus::BuildGauge()
                          .Name("narwhal_engine_inflight")
                          .Help("Legs running on an engine, by phase.")
                          .Register(r)),
      placement(r),
      link_held(prometheus::BuildGauge()
                    .Name("narwhal_link_held")
                    .Help("1 while a producer->consumer link is held out of decode placement.")
                    .Register(r)),
      kv_recompute_suspected_total(
          prometheus::BuildCounter()
              .Name("narwhal_kv_recompute_suspected_total")
              .Help("Decodes on this consumer that did not use the KV cache sent from the "
                    "prefill engine and computed the prompt again (the answer is correct, "
                    "only slower).")
              .Register(r)),
      fleet_engines(prometheus::BuildGauge()
                        .Name("narwhal_fleet_engines")
                        .Help("Engines in the fleet by role and state (serving, held, "
                              "quarantined, ejected, draining, joining).")
                        .Register(r)),
      membership_changes_total(prometheus::BuildCounter()
                                   .Name("narwhal_membership_changes_total")
                                   .Help("Engines that joined, failed a join check or left, "
                                         "by where they come from.")
                                   .Register(r)),
      config_reloads_total(prometheus::BuildCounter()
                               .Name("narwhal_config_reloads_total")
                               .Help("Config reloads applied or rejected.")
                               .Register(r)),
      config_generation(prometheus::BuildGauge()
                            .Name("narwhal_config_generation")
                            .Help("The config generation in force (1 at start-up, +1 per "
                                  "applied reload).")
                            .Register(r)
                            .Add({})),
      discovery_lookups_total(prometheus::BuildCounter()
                                  .Name("narwhal_discovery_lookups_total")
                                  .Help("DNS lookups of the fleet's DNS groups by result: ok "
                                        "(addresses), empty (no address: the members leave), "
                                        "failed (members unchanged).")
                                  .Register(r)),
      kv_events_total(prometheus::BuildCounter()
                          .Name("narwhal_kv_events_total")
                          .Help("KV-cache event blocks applied to an engine's index by kind: "
                                "stored, removed, cleared (AllBlocksCleared events), skipped "
                                "(not indexable, or an unknown removal), evicted (the index's "
                                "memory bound), unknown (events of an unknown type).")
                          .Register(r)),
      kv_event_gaps_total(prometheus::BuildCounter()
                              .Name("narwhal_kv_event_gaps_total")
                              .Help("Breaks in an engine's KV-event stream by outcome: replayed "
                                    "(the index stays exact), or the engine went cold "
                                    "(no_replay, replay_failed, replay_timeout, replay_overrun, "
                                    "reset, bad_batch, lost).")
                              .Register(r)),
      kv_index_blocks(prometheus::BuildGauge()
                          .Name("narwhal_kv_index_blocks")
                          .Help("Blocks in an engine's KV index (what its events say it "
                                "holds).")
                          .Register(r)) {
  for (const char* result : {"applied", "rejected"}) {
    config_reloads_total.Add({{"result", result}});
  }
  config_generation.Set(1);
  for (std::string_view reason : kAbandonReasonNames) {
    handoffs_abandoned_total.Add({{"reason", std::string(reason)}});
  }
  for (std::string_view outcome : kReleaseOutcomeNames) {
    handoff_releases_total.Add({{"outcome", std::string(outcome)}});
  }
}

}  // namespace narwhal::router
