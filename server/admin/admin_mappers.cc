#include "server/admin/admin_mappers.h"

#include "engines/engine_failure.h"

namespace narwhal::server {
namespace {

namespace pb = narwhal::admin::v1;
using router::EngineSnapshot;

std::string LastEjectionCause(const EngineSnapshot& s) {
  return s.last_ejection_cause ? std::string(router::EjectCauseName(*s.last_ejection_cause)) : "";
}

void FillStreak(const EngineSnapshot& s, google::protobuf::Map<std::string, int32_t>* out) {
  for (int c = 1; c < engines::kBreakerClassCount; ++c) {
    (*out)[std::string(engines::BreakerClassName(static_cast<engines::BreakerClass>(c)))] =
        s.streak[c];
  }
}

void FillHold(const EngineSnapshot& s, pb::Hold* out) {
  out->set_kind(std::string(router::HoldKindName(s.hold_kind)));
  if (s.hold_remaining_s) out->set_remaining_s(*s.hold_remaining_s);
  out->set_cause(s.hold_cause);
  out->set_held_for_s(s.held_for_s.value_or(0));
}

void FillEjection(const EngineSnapshot& s, pb::Ejection* out) {
  if (s.ejection_cause) out->set_cause(std::string(router::EjectCauseName(*s.ejection_cause)));
  out->set_detail(s.ejection_detail);
  out->set_ejected_for_s(s.ejected_for_s.value_or(0));
}

void FillProbe(const EngineSnapshot& s, pb::Probe* out) {
  if (s.last_probe_kind) out->set_kind(std::string(router::ProbeKindName(*s.last_probe_kind)));
  if (s.last_probe_outcome) {
    out->set_outcome(std::string(router::ProbeOutcomeName(*s.last_probe_outcome)));
  }
  out->set_detail(s.last_probe_detail);
  out->set_age_s(s.last_probe_age_s.value_or(0));
}

pb::Pairs PairsProto(router::PairMode mode) {
  return mode == router::PairMode::kRing ? pb::PAIRS_RING : pb::PAIRS_MESH;
}

}  // namespace

void FillEvent(const router::PublishedEvent& published, pb::Event* out) {
  using router::FleetEventKind;
  const router::FleetEvent& e = published.event;
  out->Clear();
  out->set_seq(published.seq);
  out->set_at(published.at);
  out->set_kind(std::string(router::FleetEventKindName(e.kind)));
  auto& fields = *out->mutable_fields()->mutable_fields();
  if (e.preflight) {
    // A run of the whole fleet: its outcome, detail and summary only.
    const router::PreflightSummary& p = *e.preflight;
    out->set_outcome(p.passed ? "passed" : "failed");
    out->set_detail(e.detail);
    fields["trigger"].set_string_value(p.trigger);
    fields["pairs"].set_string_value(p.pairs == router::PairMode::kRing ? "ring" : "mesh");
    fields["duration_s"].set_number_value(p.duration_s);
    auto& gates = *fields["gates"].mutable_struct_value()->mutable_fields();
    for (const auto& [gate, result] : p.gates) gates[gate].set_string_value(result);
    fields["transfers"].set_number_value(static_cast<double>(p.transfers));
    fields["transfers_passed"].set_number_value(p.transfers_passed);
    return;
  }
  out->set_iid(e.iid);
  out->set_hold_kind(std::string(router::HoldKindName(e.hold_kind)));
  out->set_cause(e.cause);
  out->set_evidence(e.evidence);
  if (e.probe_kind) out->set_probe_kind(std::string(router::ProbeKindName(*e.probe_kind)));
  if (e.outcome) out->set_outcome(std::string(router::ProbeOutcomeName(*e.outcome)));
  if (e.link_outcome) {
    out->set_outcome(std::string(router::LinkProbeOutcomeName(*e.link_outcome)));
  }
  out->set_producer(e.producer);
  out->set_detail(e.detail);
  out->set_source(e.source);
  out->set_url(e.url);
  // `fields`: only what the typed fields above do not hold.
  if (e.kind == FleetEventKind::kLinkHeld || e.kind == FleetEventKind::kLinkProbe ||
      e.kind == FleetEventKind::kLinkReadmitted) {
    fields["consumer"].set_string_value(e.consumer);
  }
}

void FillEngine(const EngineSnapshot& s, pb::Engine* out) {
  out->Clear();
  out->set_iid(s.settings.iid);
  out->set_url(s.settings.url);
  out->set_role(router::RoleName(s.settings.role));
  out->set_state(std::string(router::PlacementStateName(s.state)));
  FillStreak(s, out->mutable_streak());
  if (s.hold_kind != router::HoldKind::kNone) FillHold(s, out->mutable_hold());
  if (s.ejection_cause) FillEjection(s, out->mutable_ejection());
  out->set_last_ejection_cause(LastEjectionCause(s));
  if (s.last_probe_kind) FillProbe(s, out->mutable_last_probe());
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
  if (s.hold_kind != router::HoldKind::kNone) FillHold(s, e->mutable_hold());
  if (s.ejection_cause) FillEjection(s, e->mutable_ejection());
  e->set_last_ejection_cause(LastEjectionCause(s));
  if (s.last_probe_kind) FillProbe(s, e->mutable_last_probe());
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
