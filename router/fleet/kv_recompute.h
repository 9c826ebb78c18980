// Silent-recompute detection (README "KV handoff integrity"): a crossed
// decode (prefill on P, decode on C, P != C) whose consumer did not use the
// transferred KV cache and computed the prompt itself. The client's answer
// is correct (only slower), so nothing fails; the router finds it two ways.
//
//  (a) From the decode's usage, when the engine reports
//      usage.prompt_tokens_details.cached_tokens (vLLM with
//      --enable-prompt-tokens-details counts the pulled tokens as cached,
//      all but the last prompt token, which it recomputes):
//      RecomputeSuspected() below.
//  (b) From each consumer's own NIXL failure counter,
//      vllm:nixl_num_failed_transfers (exposed as ..._total; vLLM's
//      nixl/stats.py), scraped from its /metrics: an increase is a failed
//      transfer. RecomputeLedger decides which increases the router has not
//      already accounted for.
//
// Pure logic: no I/O, no clock, no lock (every call takes `now`).
#ifndef NARWHAL_ROUTER_FLEET_KV_RECOMPUTE_H_
#define NARWHAL_ROUTER_FLEET_KV_RECOMPUTE_H_

#include <cstddef>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "engines/api.h"

namespace narwhal::router {

using engines::MonoTime;

// vLLM's default KV block (tokens): the slack rule (a) allows.
inline constexpr long long kKvBlockTokens = 16;

// Rule (a): a crossed decode whose usage reports `cached_tokens` for a
// prompt of `prompt_tokens` recomputed its prompt when the prompt has at
// least 2 tokens and cached_tokens < max(1, prompt_tokens - 1 -
// kKvBlockTokens): none cached, or more than one KV block short of the
// prompt less its recomputed last token. False when either is unknown (< 0).
bool RecomputeSuspected(long long prompt_tokens, long long cached_tokens);

// The sample names of vLLM's failed-transfer counter: prometheus_client
// exposes the counter vllm:nixl_num_failed_transfers as ..._total.
inline constexpr std::string_view kFailedTransfersMetric = "vllm:nixl_num_failed_transfers_total";
inline constexpr std::string_view kFailedTransfersMetricBare = "vllm:nixl_num_failed_transfers";

// The sum of every sample of the failed-transfer counter (one per engine
// label set) in a Prometheus text exposition, or nullopt when it has none
// (an engine without the NIXL connector). Malformed lines are skipped.
std::optional<double> FailedTransfers(std::string_view metrics_text);

// What a scrape settled: failed transfers no decode of this router
// accounts for, each counted as a suspected recompute on the consumer, and
// the producer when every crossed decode that could have caused it came
// from that one producer ("" otherwise).
struct RecomputeSettlement {
  long long count = 0;
  std::vector<std::string> producers;  // one entry per counted transfer
};

// Per consumer: which increases of its failed-transfer counter are
// explained by what the router saw itself, so that nothing is counted twice.
//  - A crossed decode that ends with a recompute found by rule (a), or with
//    a failure (vLLM's default kv_load_failure_policy "fail" fails the
//    request), explains one failed transfer: it takes one pending increase,
//    or leaves a credit that the next increase (within kCreditTtl) uses.
//  - An increase not covered by credits is pending while crossed decodes
//    on that consumer are in flight (one of them may still end with rule
//    (a) evidence or a failure); what exceeds the decodes in flight is
//    settled: counted.
//  - The first scrape sets the baseline; a counter that went down (the
//    engine restarted) sets a new one.
// An increase is attributed to a producer only when exactly one producer's
// handoffs were decoded on the consumer since the previous scrape (or are
// still in flight); otherwise to the consumer alone.
class RecomputeLedger {
 public:
  static constexpr double kCreditTtlS = 30;
  static constexpr size_t kMaxPending = 10000;

  RecomputeLedger() = default;

  void DecodeStarted(const std::string& consumer, const std::string& producer);
  // `explained`: the decode ended with rule (a) evidence or failed.
  void DecodeEnded(const std::string& consumer, const std::string& producer, bool explained,
                   MonoTime now);
  // A scrape of `consumer` read `value` (nullopt: no counter or no answer).
  RecomputeSettlement Scrape(const std::string& consumer, std::optional<double> value,
                             MonoTime now);

 private:
  struct Consumer {
    std::optional<double> last;
    std::multiset<std::string> inflight;  // producers of crossed decodes in flight
    std::set<std::string> seen;           // producers decoded since the last scrape
    std::deque<MonoTime> credits;
    std::deque<std::string> pending;  // per pending increase: its producer or ""
  };
  std::map<std::string, Consumer> consumers_;
};

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_FLEET_KV_RECOMPUTE_H_
