#include "router/fleet/fleet_event_counts.h"

namespace narwhal::router {

void FleetEventCounts::Count(const FleetEvent& e) {
  if (e.iid.empty()) return;
  switch (e.kind) {
    case FleetEventKind::kEngineHoldStarted: {
      std::lock_guard<std::mutex> lock(mu_);
      ++engines_[e.iid].holds;
      return;
    }
    case FleetEventKind::kEngineEjected: {
      if (metrics_ != nullptr) {
        metrics_->engine_ejections_total.Add({{"iid", e.iid}, {"cause", e.cause}}).Increment();
      }
      std::lock_guard<std::mutex> lock(mu_);
      ++engines_[e.iid].ejections;
      return;
    }
    case FleetEventKind::kEngineProbe: {
      if (!e.probe_kind || !e.outcome) return;
      if (metrics_ != nullptr) {
        metrics_->engine_probes_total
            .Add({{"iid", e.iid},
                  {"kind", std::string(ProbeKindName(*e.probe_kind))},
                  {"outcome", std::string(ProbeOutcomeName(*e.outcome))}})
            .Increment();
      }
      // A producer that failed is an attempt, not a settled probe.
      if (*e.outcome == ProbeOutcome::kProducerFailed) return;
      std::lock_guard<std::mutex> lock(mu_);
      EngineEventCounts& c = engines_[e.iid];
      ++c.probes;
      if (*e.outcome == ProbeOutcome::kFailed) ++c.probes_failed;
      return;
    }
    case FleetEventKind::kEngineReadmitted: {
      if (metrics_ != nullptr) {
        metrics_->engine_readmissions_total.Add({{"iid", e.iid}, {"evidence", e.evidence}})
            .Increment();
      }
      std::lock_guard<std::mutex> lock(mu_);
      EngineEventCounts& c = engines_[e.iid];
      ++c.readmissions;
      c.last_readmission_evidence = e.evidence;
      return;
    }
    default:
      return;
  }
}

std::map<std::string, EngineEventCounts> FleetEventCounts::Engines() const {
  std::lock_guard<std::mutex> lock(mu_);
  return engines_;
}

}  // namespace narwhal::router
