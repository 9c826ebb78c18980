#include "router/fleet/engine_series.h"

#include <string>

#include "router/fleet/breaker_book.h"

namespace narwhal::router {
namespace {

using engines::Phase;

int PhaseIndex(Phase phase) { return phase == Phase::kPrefill ? 0 : 1; }

bool Runs(const EngineSettings& e, Phase phase) {
  return phase == Phase::kPrefill ? CanPrefill(e.role) : CanDecode(e.role);
}

// Calls `each(family, labels)` for every series of `e`.
template <typename Gauges, typename Counters>
void ForEachSeries(Metrics& m, const EngineSettings& e, Gauges gauge, Counters counter) {
  const std::string& iid = e.iid;
  for (int c = 1; c < engines::kBreakerClassCount; ++c) {
    gauge(m.engine_breaker_streak,
          {{"iid", iid}, {"class", std::string(engines::BreakerClassName(static_cast<engines::BreakerClass>(c)))}});
  }
  gauge(m.engine_quarantined, {{"iid", iid}});
  gauge(m.engine_in_placement, {{"iid", iid}});
  gauge(m.engine_held, {{"iid", iid}, {"kind", "timed"}});
  gauge(m.engine_held, {{"iid", iid}, {"kind", "inference"}});
  for (EjectCause cause : kEjectCauses) {
    counter(m.engine_ejections_total, {{"iid", iid}, {"cause", std::string(EjectCauseName(cause))}});
  }
  for (ProbeKind kind : kProbeKinds) {
    for (ProbeOutcome outcome : kProbeOutcomes) {
      counter(m.engine_probes_total, {{"iid", iid},
                                      {"kind", std::string(ProbeKindName(kind))},
                                      {"outcome", std::string(ProbeOutcomeName(outcome))}});
    }
  }
  for (std::string_view evidence : kReadmissionEvidence) {
    counter(m.engine_readmissions_total, {{"iid", iid}, {"evidence", std::string(evidence)}});
  }
  for (Phase phase : {Phase::kPrefill, Phase::kDecode}) {
    if (!Runs(e, phase)) continue;
    const std::string name(engines::PhaseName(phase));
    gauge(m.engine_inflight, {{"iid", iid}, {"phase", name}});
    for (engines::FailureReason reason : engines::kFailureReasons) {
      counter(m.attempt_failures_total,
              {{"phase", name}, {"reason", std::string(engines::FailureReasonName(reason))}, {"iid", iid}});
    }
  }
  if (CanDecode(e.role)) counter(m.kv_recompute_suspected_total, {{"iid", iid}});
}

}  // namespace

EngineSeries EngineSeries::Create(Metrics* metrics, const EngineSettings& e) {
  EngineSeries s;
  if (metrics == nullptr) return s;
  ForEachSeries(
      *metrics, e,
      [](prometheus::Family<prometheus::Gauge>& f, const prometheus::Labels& l) { f.Add(l); },
      [](prometheus::Family<prometheus::Counter>& f, const prometheus::Labels& l) { f.Add(l); });
  Metrics& m = *metrics;
  const std::string& iid = e.iid;
  for (int c = 1; c < engines::kBreakerClassCount; ++c) {
    const std::string name(engines::BreakerClassName(static_cast<engines::BreakerClass>(c)));
    s.streak[c] = &m.engine_breaker_streak.Add({{"iid", iid}, {"class", name}});
  }
  s.quarantined = &m.engine_quarantined.Add({{"iid", iid}});
  s.in_placement = &m.engine_in_placement.Add({{"iid", iid}});
  s.held_timed = &m.engine_held.Add({{"iid", iid}, {"kind", "timed"}});
  s.held_inference = &m.engine_held.Add({{"iid", iid}, {"kind", "inference"}});
  for (Phase phase : {Phase::kPrefill, Phase::kDecode}) {
    if (!Runs(e, phase)) continue;
    const std::string name(engines::PhaseName(phase));
    s.inflight[PhaseIndex(phase)] = &m.engine_inflight.Add({{"iid", iid}, {"phase", name}});
    for (size_t r = 0; r < kReasons; ++r) {
      s.attempt_failures[PhaseIndex(phase)][r] = &m.attempt_failures_total.Add(
          {{"phase", name},
           {"reason", std::string(engines::FailureReasonName(engines::kFailureReasons[r]))},
           {"iid", iid}});
    }
  }
  if (CanDecode(e.role)) s.recompute_suspected = &m.kv_recompute_suspected_total.Add({{"iid", iid}});
  return s;
}

void EngineSeries::Remove(Metrics* metrics, const EngineSettings& e) {
  if (metrics == nullptr) return;
  ForEachSeries(
      *metrics, e,
      [](prometheus::Family<prometheus::Gauge>& f, const prometheus::Labels& l) {
        f.Remove(&f.Add(l));
      },
      [](prometheus::Family<prometheus::Counter>& f, const prometheus::Labels& l) {
        f.Remove(&f.Add(l));
      });
}

prometheus::Counter* EngineSeries::AttemptFailures(Phase phase,
                                                   engines::FailureReason reason) const {
  for (size_t r = 0; r < kReasons; ++r) {
    if (engines::kFailureReasons[r] == reason) return attempt_failures[PhaseIndex(phase)][r];
  }
  return nullptr;
}

}  // namespace narwhal::router
