#include "router/fleet/prober.h"

#include <algorithm>

#include "engines/json_limits.h"
#include "router/fleet/contract_check.h"
#include "router/fleet/kv_recompute.h"

namespace narwhal::router {
namespace {

// Reads a probe's decode stream; the adapter judges the stream itself.
class DiscardObserver : public engines::DecodeObserver {
 public:
  bool OnEvent(std::string_view, const engines::StreamEvent&) override { return true; }
};

// A link probe's decode: keeps the usage, so a consumer that recomputes the
// prompt (router/fleet/kv_recompute.h, rule (a)) fails the probe.
class UsageObserver : public engines::DecodeObserver {
 public:
  bool OnEvent(std::string_view, const engines::StreamEvent& ev) override {
    if (ev.prompt_tokens >= 0) prompt_tokens = ev.prompt_tokens;
    if (ev.cached_tokens >= 0) cached_tokens = ev.cached_tokens;
    return true;
  }
  long long prompt_tokens = -1;
  long long cached_tokens = -1;
};

}  // namespace

engines::LegOptions Prober::ProbeLeg(const std::string& suffix) {
  engines::LegOptions o;
  o.backend_request_id = "narwhal-probe-" + std::to_string(++counter_) + suffix;
  // B17: each probe leg is bounded by the first-token budget.
  // The adapter's own first-token timer (first_token_timeout_s) ends a
  // silent leg with its precise detail; the deadline is only a backstop for
  // the rest of a one-token leg.
  const MonoTime now = clock_.Now();
  o.leg_deadline = now + engines::FromSeconds(fleet_.settings()->engine.first_token_timeout_s);
  o.request_deadline = *o.leg_deadline + std::chrono::milliseconds(250);
  return o;
}

engines::Awaitable<ProbeResult> Prober::Health(engines::EngineTarget target, bool lifecycle) {
  ProbeResult r;
  // A health check is /health and the served model on /v1/models: vLLM
  // answers /health without the API key and whatever model it serves, so
  // /health alone passes an engine that refuses every inference leg.
  std::string why;
  if (lifecycle) {
    why = co_await CheckLifecycle(client_, target, *fleet_.settings());
  } else {
    why = co_await CheckReach(client_, target, *fleet_.settings());
    if (why.empty()) why = co_await CheckModel(client_, target, *fleet_.settings());
  }
  r.outcome = why.empty() ? ProbeOutcome::kPassed : ProbeOutcome::kFailed;
  r.detail = why.empty()
                 ? (lifecycle ? "lifecycle validation passed"
                              : "GET /health 200, /v1/models serves " + fleet_.settings()->model)
                 : why;
  co_return r;
}

engines::Awaitable<ProbeResult> Prober::Inference(ProbeTask task, bool lifecycle) {
  ProbeResult r;
  const std::optional<engines::EngineTarget> found = fleet_.Target(task.iid);
  if (!found) {
    r.detail = "engine left the fleet";
    co_return r;
  }
  const engines::EngineTarget target = *found;
  const engines::Api api = engines::Api::kCompletions;
  const nlohmann::json body = {
      {"model", fleet_.settings()->model},
      {"prompt", "narwhal-" + std::to_string(++counter_) + " breaker verification"},
      {"max_tokens", 1}};
  const std::optional<EngineSnapshot> snapshot = fleet_.Snapshot(task.iid);
  const Role role = snapshot ? snapshot->settings.role : Role::kBoth;
  DiscardObserver observer;

  if (fleet_.ProbeSide(task.iid) == Phase::kDecode && CanDecode(role)) {
    // Producers: the recorded one, other live ones, then standalone.
    std::vector<engines::EngineTarget> producers;
    const std::string recorded = fleet_.RecordedProducer(task.iid);
    std::vector<engines::EngineTarget> live = fleet_.LiveProducers(target.iid);
    auto it = std::find_if(live.begin(), live.end(),
                           [&](const engines::EngineTarget& t) { return t.iid == recorded; });
    if (it != live.end()) {
      producers.push_back(*it);
      live.erase(it);
    }
    producers.insert(producers.end(), live.begin(), live.end());
    // Standalone: both legs on the held engine, whatever its placement role
    // (the decode leg is then a same-worker decode, B5).
    producers.push_back(target);
    for (const engines::EngineTarget& producer : producers) {
      engines::PrefillOutcome pre = co_await client_.Prefill(producer, api, body, ProbeLeg("p"));
      if (!pre.ok()) {
        fleet_.RecordProbeAttempt(task, ProbeOutcome::kProducerFailed, producer.iid,
                                  pre.failure->detail);
        continue;
      }
      engines::DecodeOutcome dec =
          co_await client_.Decode(target, *pre.result, body, false, ProbeLeg("d"), observer);
      if (!dec.ok() && producer.iid != target.iid && dec.failure->evidence_iid == producer.iid) {
        // The producer's handoff was at fault (B3), not the held engine.
        fleet_.RecordProbeAttempt(task, ProbeOutcome::kProducerFailed, producer.iid,
                                  dec.failure->detail);
        continue;
      }
      r.producer = producer.iid;
      if (dec.ok()) {
        r.outcome = ProbeOutcome::kPassed;
        r.detail = "decoded a handoff from " + producer.iid;
      } else {
        r.outcome = ProbeOutcome::kFailed;
        r.detail = dec.failure->detail;
      }
      break;
    }
    if (r.producer.empty()) r.detail = "no producer could make a handoff";
  } else {
    engines::PrefillOutcome pre = co_await client_.Prefill(target, api, body, ProbeLeg("p"));
    if (!pre.ok()) {
      r.outcome = ProbeOutcome::kFailed;
      r.detail = pre.failure->detail;
      co_return r;
    }
    std::optional<engines::EngineTarget> consumer = fleet_.LiveConsumer(target.iid);
    if (!consumer && CanDecode(role)) consumer = target;
    if (!consumer) {
      r.outcome = ProbeOutcome::kInconclusive;
      r.detail = "produced a handoff but no live consumer could take it";
      co_return r;
    }
    engines::DecodeOutcome dec =
        co_await client_.Decode(*consumer, *pre.result, body, false, ProbeLeg("d"), observer);
    if (dec.ok()) {
      r.outcome = ProbeOutcome::kPassed;
      r.detail = "handoff decoded by " + consumer->iid;
    } else if (dec.failure->evidence_iid == target.iid || consumer->iid == target.iid) {
      r.outcome = ProbeOutcome::kFailed;
      r.detail = dec.failure->detail;
    } else {
      r.outcome = ProbeOutcome::kInconclusive;
      r.detail = "consumer " + consumer->iid + " failed: " + dec.failure->detail;
    }
  }
  if (r.outcome == ProbeOutcome::kPassed && lifecycle) {
    if (std::string why = co_await CheckLifecycle(client_, target, *fleet_.settings());
        !why.empty()) {
      r.outcome = ProbeOutcome::kFailed;
      r.detail = "lifecycle validation: " + why;
    }
  }
  co_return r;
}

engines::Awaitable<long long> Prober::MaxModelLen(engines::EngineTarget target) {
  const engines::ControlResponse r = co_await client_.Control(
      target, "GET", "/v1/models", "", fleet_.settings()->engine.health_timeout_s);
  if (!r.ok()) co_return 0;
  const nlohmann::json list = engines::ParseJson(r.body);
  if (!list.is_object() || !list.contains("data") || !list["data"].is_array()) co_return 0;
  for (const nlohmann::json& card : list["data"]) {
    if (!card.is_object() || card.value("id", nlohmann::json()) != fleet_.settings()->model)
      continue;
    auto it = card.find("max_model_len");
    if (it != card.end() && it->is_number_integer()) co_return it->get<long long>();
  }
  co_return 0;
}

engines::Awaitable<ProbeResult> Prober::ProbeLink(LinkProbeTask task) {
  ProbeResult r;
  const std::optional<engines::EngineTarget> found_producer = fleet_.Target(task.producer);
  const std::optional<engines::EngineTarget> found_consumer = fleet_.Target(task.consumer);
  if (!found_producer || !found_consumer) {
    r.detail = "an engine of the link left the fleet";
    co_return r;
  }
  const engines::EngineTarget producer = *found_producer;
  const engines::EngineTarget consumer = *found_consumer;
  const engines::Api api = engines::Api::kCompletions;
  const nlohmann::json body = {
      {"model", fleet_.settings()->model},
      {"prompt", "narwhal-" + std::to_string(++counter_) + " link verification"},
      {"max_tokens", 1}};
  r.producer = producer.iid;
  engines::PrefillOutcome pre = co_await client_.Prefill(producer, api, body, ProbeLeg("p"));
  if (!pre.ok()) {
    r.outcome = ProbeOutcome::kInconclusive;
    r.detail = "producer " + producer.iid + " failed: " + pre.failure->detail;
    co_return r;
  }
  UsageObserver observer;
  fleet_.RecomputeDecodeStarted(producer.iid, consumer.iid);
  engines::DecodeOutcome dec =
      co_await client_.Decode(consumer, *pre.result, body, false, ProbeLeg("d"), observer);
  const bool recomputed =
      dec.ok() && RecomputeSuspected(observer.prompt_tokens, observer.cached_tokens);
  fleet_.RecomputeProbeEnded(producer.iid, consumer.iid,
                             recomputed || (!dec.ok() && !dec.handoff_left_with_producer));
  if (recomputed) {
    r.outcome = ProbeOutcome::kFailed;
    r.detail = consumer.iid + " recomputed the prompt instead of using the KV cache from " +
               producer.iid + " (cached_tokens " + std::to_string(observer.cached_tokens) + " of " +
               std::to_string(observer.prompt_tokens) + " prompt tokens)";
  } else if (dec.ok()) {
    r.outcome = ProbeOutcome::kPassed;
    r.detail = consumer.iid + " decoded a handoff from " + producer.iid;
  } else if (dec.failure->evidence_iid == producer.iid) {
    r.outcome = ProbeOutcome::kInconclusive;
    r.detail = "producer " + producer.iid + "'s handoff was at fault: " + dec.failure->detail;
  } else {
    r.outcome = ProbeOutcome::kFailed;
    r.detail = dec.failure->detail;
  }
  co_return r;
}

engines::Awaitable<void> Prober::RunLink(LinkProbeTask task) {
  const ProbeResult r = co_await ProbeLink(task);
  const LinkProbeOutcome outcome = r.outcome == ProbeOutcome::kPassed ? LinkProbeOutcome::kPassed
                                   : r.outcome == ProbeOutcome::kFailed
                                       ? LinkProbeOutcome::kFailed
                                       : LinkProbeOutcome::kInconclusive;
  fleet_.CompleteLinkProbe(task, outcome, r.detail);
}

engines::Awaitable<void> Prober::ScrapeRecompute(RecomputeScrapeTask task) {
  const std::optional<engines::EngineTarget> target = fleet_.Target(task.iid);
  if (!target) co_return;
  const engines::ControlResponse res = co_await client_.Control(
      *target, "GET", "/metrics", "", fleet_.settings()->engine.health_timeout_s);
  std::optional<double> value;
  if (res.ok()) value = FailedTransfers(res.body);
  fleet_.CompleteRecomputeScrape(task, value);
}

engines::Awaitable<ProbeResult> Prober::JoinCheck(JoinTask task) {
  const engines::EngineTarget& target = task.target;
  ProbeResult r = co_await Health(target, fleet_.settings()->engine_contract.has_value());
  if (r.outcome != ProbeOutcome::kPassed) {
    r.outcome = ProbeOutcome::kFailed;
    co_return r;
  }
  // Peers: live engines first, then other joiners.
  const bool decodes = CanDecode(task.role);
  const Phase peer_phase = decodes ? Phase::kPrefill : Phase::kDecode;
  std::vector<engines::EngineTarget> peers;
  if (decodes) {
    peers = fleet_.LiveProducers(target.iid);
  } else if (std::optional<engines::EngineTarget> c = fleet_.LiveConsumer(target.iid)) {
    peers.push_back(*c);
  }
  for (const engines::EngineTarget& p : fleet_.JoiningPeers(peer_phase, target.iid)) {
    peers.push_back(p);
  }
  if (task.role == Role::kBoth) peers.push_back(target);  // pairs with itself
  if (peers.empty()) {
    r.outcome = ProbeOutcome::kFailed;
    r.detail = std::string("no ") + (decodes ? "producer" : "consumer") +
               " in the fleet to run its one-token inference probe with";
    co_return r;
  }
  const nlohmann::json body = {
      {"model", fleet_.settings()->model},
      {"prompt", "narwhal-" + std::to_string(++counter_) + " join verification"},
      {"max_tokens", 1}};
  DiscardObserver observer;
  std::string tried;
  for (const engines::EngineTarget& peer : peers) {
    const engines::EngineTarget& producer = decodes ? peer : target;
    const engines::EngineTarget& consumer = decodes ? target : peer;
    engines::PrefillOutcome pre =
        co_await client_.Prefill(producer, engines::Api::kCompletions, body, ProbeLeg("p"));
    if (!pre.ok()) {
      if (producer.iid == target.iid) {
        r.outcome = ProbeOutcome::kFailed;
        r.detail = "prefill: " + pre.failure->detail;
        co_return r;
      }
      tried += (tried.empty() ? "" : "; ") + producer.iid + " failed: " + pre.failure->detail;
      continue;  // the peer's fault: the next one
    }
    engines::DecodeOutcome dec =
        co_await client_.Decode(consumer, *pre.result, body, false, ProbeLeg("d"), observer);
    if (dec.ok()) {
      r.outcome = ProbeOutcome::kPassed;
      r.producer = producer.iid;
      r.detail = "GET /health 200, /v1/models serves " + fleet_.settings()->model + ", " +
                 consumer.iid + " decoded a handoff from " + producer.iid;
      if (const long long n = co_await MaxModelLen(target); n > 0)
        fleet_.RecordMaxModelLen(target.iid, n);
      co_return r;
    }
    const bool joiner_at_fault =
        consumer.iid == target.iid || dec.failure->evidence_iid == target.iid;
    if (joiner_at_fault) {
      r.outcome = ProbeOutcome::kFailed;
      r.detail = "decode: " + dec.failure->detail;
      co_return r;
    }
    tried += (tried.empty() ? "" : "; ") + consumer.iid + " failed: " + dec.failure->detail;
  }
  r.outcome = ProbeOutcome::kFailed;
  r.detail = "no peer completed its inference probe (" + tried + ")";
  co_return r;
}

engines::Awaitable<void> Prober::RunJoin(JoinTask task) {
  const ProbeResult r = co_await JoinCheck(task);
  fleet_.CompleteJoinCheck(task, r.outcome == ProbeOutcome::kPassed, r.detail);
}

engines::Awaitable<void> Prober::Run(ProbeTask task) {
  const std::optional<EngineSnapshot> snapshot = fleet_.Snapshot(task.iid);
  if (!snapshot) co_return;  // it left the fleet
  const engines::EngineTarget target{snapshot->settings.iid, snapshot->settings.url,
                                     snapshot->settings.kv_engine_id};
  // Readmission (of a held or ejected engine) re-checks the pinned contract.
  const bool readmission =
      snapshot->state == PlacementState::kEjected || snapshot->state == PlacementState::kHeld;
  const bool lifecycle = readmission && fleet_.settings()->engine_contract.has_value();
  ProbeResult r;
  switch (task.kind) {
    case ProbeKind::kHealth:
    case ProbeKind::kLiveness:
      r = co_await Health(target, lifecycle);
      break;
    case ProbeKind::kInference:
      r = co_await Inference(task, lifecycle);
      break;
  }
  fleet_.CompleteProbe(task, r.outcome, r.detail, r.producer);
}

}  // namespace narwhal::router
