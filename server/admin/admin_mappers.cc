#include "server/admin/admin_mappers.h"

#include <algorithm>
#include <iterator>
#include <string_view>

#include "engines/engine_failure.h"
#include "server/admin/struct_codec.h"

namespace narwhal::server {
namespace {

namespace pb = narwhal::admin::v1;
using router::EngineSnapshot;

std::string JsonString(const nlohmann::json& event, const char* key) {
  auto it = event.find(key);
  return it != event.end() && it->is_string() ? it->get<std::string>() : std::string();
}

void FillStreak(const EngineSnapshot& s, google::protobuf::Map<std::string, int32_t>* out) {
  for (int c = 1; c < engines::kBreakerClassCount; ++c) {
    (*out)[std::string(engines::BreakerClassName(static_cast<engines::BreakerClass>(c)))] =
        s.streak[c];
  }
}

void FillHold(const EngineSnapshot& s, pb::Hold* out) {
  out->set_kind(s.hold_kind);
  if (s.hold_remaining_s) out->set_remaining_s(*s.hold_remaining_s);
  out->set_cause(s.hold_cause);
  out->set_held_for_s(s.held_for_s.value_or(0));
}

void FillEjection(const EngineSnapshot& s, pb::Ejection* out) {
  out->set_cause(s.ejection_cause);
  out->set_detail(s.ejection_detail);
  out->set_ejected_for_s(s.ejected_for_s.value_or(0));
}

void FillProbe(const EngineSnapshot& s, pb::Probe* out) {
  out->set_kind(s.last_probe_kind);
  out->set_outcome(s.last_probe_outcome);
  out->set_detail(s.last_probe_detail);
  out->set_age_s(s.last_probe_age_s.value_or(0));
}

pb::Pairs PairsProto(router::PairMode mode) {
  return mode == router::PairMode::kRing ? pb::PAIRS_RING : pb::PAIRS_MESH;
}

}  // namespace

void FillEvent(const nlohmann::json& event, pb::Event* out) {
  out->Clear();
  out->set_seq(event.value("seq", 0LL));
  auto at = event.find("at");
  if (at != event.end() && at->is_number()) out->set_at(at->get<double>());
  out->set_kind(JsonString(event, "event"));
  out->set_iid(JsonString(event, "iid"));
  out->set_hold_kind(JsonString(event, "hold_kind"));
  out->set_cause(JsonString(event, "cause"));
  out->set_evidence(JsonString(event, "evidence"));
  out->set_probe_kind(JsonString(event, "probe_kind"));
  out->set_outcome(JsonString(event, "outcome"));
  out->set_producer(JsonString(event, "producer"));
  out->set_detail(JsonString(event, "detail"));
  out->set_source(JsonString(event, "source"));
  out->set_url(JsonString(event, "url"));
  // `fields` holds only what the typed fields above do not.
  static constexpr std::string_view kTyped[] = {
      "seq",         "at",      "event",    "iid",    "hold_kind", "cause", "evidence",
      "probe_kind",  "outcome", "producer", "detail", "source",    "url"};
  nlohmann::json rest = nlohmann::json::object();
  if (event.is_object()) {
    for (const auto& [key, value] : event.items()) {
      if (std::find(std::begin(kTyped), std::end(kTyped), key) == std::end(kTyped)) {
        rest[key] = value;
      }
    }
  }
  JsonToStruct(rest, out->mutable_fields());
}

void FillEngine(const EngineSnapshot& s, pb::Engine* out) {
  out->Clear();
  out->set_iid(s.settings.iid);
  out->set_url(s.settings.url);
  out->set_role(router::RoleName(s.settings.role));
  out->set_state(std::string(router::PlacementStateName(s.state)));
  FillStreak(s, out->mutable_streak());
  if (!s.hold_kind.empty()) FillHold(s, out->mutable_hold());
  if (!s.ejection_cause.empty()) FillEjection(s, out->mutable_ejection());
  out->set_last_ejection_cause(s.last_ejection_cause);
  if (!s.last_probe_kind.empty()) FillProbe(s, out->mutable_last_probe());
  if (s.next_probe_in_s) out->set_next_probe_in_s(*s.next_probe_in_s);
  out->set_probe_failures(s.probe_failures);
  out->set_probe_running(s.probe_running);
  out->set_liveness_misses(s.liveness_misses);
  out->set_inflight_prefill(s.inflight_prefill);
  out->set_inflight_decode(s.inflight_decode);
  out->set_prefix_index_chunks(static_cast<int32_t>(s.prefix_index_chunks));
  out->set_reserved_decode(s.reserved_decode);
  out->set_explanation(s.explanation);
  out->set_source(s.source);
}

void FillBreakerEntry(const EngineSnapshot& s, const router::EngineEventCounts& c,
                      pb::BreakerEntry* e) {
  e->set_iid(s.settings.iid);
  e->set_state(std::string(router::PlacementStateName(s.state)));
  FillStreak(s, e->mutable_streak());
  if (!s.hold_kind.empty()) FillHold(s, e->mutable_hold());
  if (!s.ejection_cause.empty()) FillEjection(s, e->mutable_ejection());
  e->set_last_ejection_cause(s.last_ejection_cause);
  if (!s.last_probe_kind.empty()) FillProbe(s, e->mutable_last_probe());
  if (s.next_probe_in_s) e->set_next_probe_in_s(*s.next_probe_in_s);
  e->set_probe_failures(s.probe_failures);
  e->set_probe_running(s.probe_running);
  e->set_liveness_misses(s.liveness_misses);
  e->set_explanation(s.explanation);
  pb::BreakerCounters* pc = e->mutable_counters();
  pc->set_holds(c.holds);
  pc->set_ejections(c.ejections);
  pc->set_probes(c.probes);
  pc->set_probes_failed(c.probes_failed);
  pc->set_readmissions(c.readmissions);
  pc->set_last_readmission_evidence(c.last_readmission_evidence);
}

void FillPolicy(const router::RecoverySettings& r, pb::RecoveryPolicy* policy) {
  policy->set_eject_after(r.eject_after);
  policy->set_failure_quarantine_s(r.failure_quarantine_s);
  policy->set_readmit_interval_s(r.readmit_interval_s);
  policy->set_liveness_interval_s(r.liveness_interval_s);
  policy->set_liveness_misses(r.liveness_misses);
  policy->set_engine_restart_policy(
      r.engine_restart_policy == router::RestartPolicy::kWholeWave ? "whole_wave" : "individual");
}

void FillQuarantine(const EngineSnapshot& s, pb::QuarantineEntry* q) {
  q->set_iid(s.settings.iid);
  q->set_remaining_s(s.hold_remaining_s.value_or(0));
  q->set_cause(s.hold_cause);
  q->set_held_for_s(s.held_for_s.value_or(0));
}

void FillLink(const router::LinkSnapshot& l, pb::Link* out) {
  out->set_producer(l.producer);
  out->set_consumer(l.consumer);
  out->set_state(std::string(router::LinkStateName(l.state)));
  out->set_since(l.since);
  out->set_cause(l.cause);
  out->set_streak(l.streak);
  out->set_successes(l.successes);
  out->set_failures(l.failures);
  if (l.last_success_age_s) out->set_last_success_age_s(*l.last_success_age_s);
  if (l.last_failure_age_s) out->set_last_failure_age_s(*l.last_failure_age_s);
  out->set_last_failure(l.last_failure);
  if (l.next_probe_in_s) out->set_next_probe_in_s(*l.next_probe_in_s);
  out->set_probe_failures(l.probe_failures);
  out->set_probe_running(l.probe_running);
}

void FillReport(const router::PreflightReport& r, const std::string& trigger,
                pb::PreflightReport* out) {
  out->Clear();
  out->set_passed(r.passed);
  out->set_started_at(r.started_at);
  out->set_duration_s(r.duration_s);
  out->set_pairs(PairsProto(r.pairs));
  for (const router::PreflightGate& g : r.gates) {
    pb::PreflightGate* p = out->add_gates();
    p->set_name(g.name);
    p->set_passed(g.passed);
    p->set_skipped(g.skipped);
    p->set_detail(g.detail);
    p->set_duration_s(g.duration_s);
  }
  for (const router::PreflightCheck& c : r.checks) {
    pb::PreflightCheck* p = out->add_checks();
    p->set_gate(c.gate);
    p->set_iid(c.iid);
    p->set_outcome(c.outcome);
    p->set_detail(c.detail);
    p->set_duration_s(c.duration_s);
  }
  for (const router::PreflightPair& t : r.transfers) {
    pb::PreflightTransfer* p = out->add_transfers();
    p->set_producer(t.producer);
    p->set_consumer(t.consumer);
    p->set_outcome(t.outcome);
    p->set_detail(t.detail);
    p->set_prefill_s(t.prefill_s);
    p->set_first_token_s(t.first_token_s);
    p->set_duration_s(t.duration_s);
  }
  out->set_trigger(trigger);
  out->set_table(r.ToTable());
}

}  // namespace narwhal::server
