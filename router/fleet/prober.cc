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
  o.leg_deadline = now + engines::FromSeconds(settings_.engine.first_token_timeout_s);
  o.request_deadline = *o.leg_deadline + std::chrono::milliseconds(250);
  return o;
}

ProbeResult Prober::Health(const engines::EngineTarget& target, bool lifecycle) {
  ProbeResult r;
  const std::string why = lifecycle ? CheckLifecycle(client_, target, settings_)
                                    : CheckReach(client_, target, settings_);
  r.outcome = why.empty() ? ProbeOutcome::kPassed : ProbeOutcome::kFailed;
  r.detail = why.empty() ? (lifecycle ? "lifecycle validation passed" : "GET /health 200") : why;
  return r;
}

ProbeResult Prober::Inference(const ProbeTask& task, bool lifecycle) {
  const engines::EngineTarget target = fleet_.Target(task.index);
  const engines::Api api = engines::Api::kCompletions;
  const nlohmann::json body = {{"model", settings_.model},
                               {"prompt", "narwhal-" + std::to_string(++counter_) +
                                              " breaker verification"},
                               {"max_tokens", 1}};
  const Role role = settings_.engines[task.index].role;
  ProbeResult r;
  DiscardObserver observer;

  if (fleet_.ProbeSide(task.index) == Phase::kDecode && CanDecode(role)) {
    // Producers: the recorded one, other live ones, then standalone.
    std::vector<engines::EngineTarget> producers;
    const std::string recorded = fleet_.RecordedProducer(task.index);
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
      engines::PrefillOutcome pre = client_.Prefill(producer, api, body, ProbeLeg("p"));
      if (!pre.ok()) {
        fleet_.RecordProbeAttempt(task, ProbeOutcome::kProducerFailed, producer.iid,
                                  pre.failure->detail);
        continue;
      }
      engines::DecodeOutcome dec =
          client_.Decode(target, *pre.result, body, false, ProbeLeg("d"), observer);
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
    engines::PrefillOutcome pre = client_.Prefill(target, api, body, ProbeLeg("p"));
    if (!pre.ok()) {
      r.outcome = ProbeOutcome::kFailed;
      r.detail = pre.failure->detail;
      return r;
    }
    std::optional<engines::EngineTarget> consumer = fleet_.LiveConsumer(target.iid);
    if (!consumer && CanDecode(role)) consumer = target;
    if (!consumer) {
      r.outcome = ProbeOutcome::kInconclusive;
      r.detail = "produced a handoff but no live consumer could take it";
      return r;
    }
    engines::DecodeOutcome dec =
        client_.Decode(*consumer, *pre.result, body, false, ProbeLeg("d"), observer);
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
    if (std::string why = CheckLifecycle(client_, target, settings_); !why.empty()) {
      r.outcome = ProbeOutcome::kFailed;
      r.detail = "lifecycle validation: " + why;
    }
  }
  return r;
}

long long Prober::MaxModelLen(const engines::EngineTarget& target) {
  const engines::ControlResponse r =
      client_.Control(target, "GET", "/v1/models", "", settings_.engine.health_timeout_s);
  if (!r.ok()) return 0;
  const nlohmann::json list = engines::ParseJson(r.body);
  if (!list.is_object() || !list.contains("data") || !list["data"].is_array()) return 0;
  for (const nlohmann::json& card : list["data"]) {
    if (!card.is_object() || card.value("id", nlohmann::json()) != settings_.model) continue;
    auto it = card.find("max_model_len");
    if (it != card.end() && it->is_number_integer()) return it->get<long long>();
  }
  return 0;
}

ProbeResult Prober::ProbeLink(const LinkProbeTask& task) {
  const engines::EngineTarget producer = fleet_.Target(task.producer);
  const engines::EngineTarget consumer = fleet_.Target(task.consumer);
  const engines::Api api = engines::Api::kCompletions;
  const nlohmann::json body = {{"model", settings_.model},
                               {"prompt", "narwhal-" + std::to_string(++counter_) +
                                              " link verification"},
                               {"max_tokens", 1}};
  ProbeResult r;
  r.producer = producer.iid;
  engines::PrefillOutcome pre = client_.Prefill(producer, api, body, ProbeLeg("p"));
  if (!pre.ok()) {
    r.outcome = ProbeOutcome::kInconclusive;
    r.detail = "producer " + producer.iid + " failed: " + pre.failure->detail;
    return r;
  }
  UsageObserver observer;
  fleet_.RecomputeDecodeStarted(producer.iid, consumer.iid);
  engines::DecodeOutcome dec =
      client_.Decode(consumer, *pre.result, body, false, ProbeLeg("d"), observer);
  const bool recomputed =
      dec.ok() && RecomputeSuspected(observer.prompt_tokens, observer.cached_tokens);
  fleet_.RecomputeProbeEnded(producer.iid, consumer.iid,
                             recomputed || (!dec.ok() && !dec.handoff_left_with_producer));
  if (recomputed) {
    r.outcome = ProbeOutcome::kFailed;
    r.detail = consumer.iid + " recomputed the prompt instead of using the KV cache from " +
               producer.iid + " (cached_tokens " + std::to_string(observer.cached_tokens) +
               " of " + std::to_string(observer.prompt_tokens) + " prompt tokens)";
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
  return r;
}

void Prober::RunLink(const LinkProbeTask& task) {
  const ProbeResult r = ProbeLink(task);
  const LinkProbeOutcome outcome = r.outcome == ProbeOutcome::kPassed ? LinkProbeOutcome::kPassed
                                   : r.outcome == ProbeOutcome::kFailed
                                       ? LinkProbeOutcome::kFailed
                                       : LinkProbeOutcome::kInconclusive;
  fleet_.CompleteLinkProbe(task, outcome, r.detail);
}

void Prober::ScrapeRecompute(const RecomputeScrapeTask& task) {
  const engines::EngineTarget target = fleet_.Target(task.index);
  const engines::ControlResponse res =
      client_.Control(target, "GET", "/metrics", "", settings_.engine.health_timeout_s);
  std::optional<double> value;
  if (res.ok()) value = FailedTransfers(res.body);
  fleet_.CompleteRecomputeScrape(task, value);
}

void Prober::Run(const ProbeTask& task) {
  const engines::EngineTarget target = fleet_.Target(task.index);
  const EngineSnapshot snapshot = fleet_.Snapshot()[task.index];
  // Readmission (of a held or ejected engine) re-checks the pinned contract.
  const bool readmission =
      snapshot.state == PlacementState::kEjected || snapshot.state == PlacementState::kHeld;
  const bool lifecycle = readmission && settings_.engine_contract.has_value();
  ProbeResult r;
  switch (task.kind) {
    case ProbeKind::kHealth:
    case ProbeKind::kLiveness:
      r = Health(target, lifecycle);
      break;
    case ProbeKind::kInference:
      r = Inference(task, lifecycle);
      break;
  }
  fleet_.CompleteProbe(task, r.outcome, r.detail, r.producer);
}

}  // namespace narwhal::router
