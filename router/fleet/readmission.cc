#include "router/fleet/readmission.h"

#include <absl/status/status.h>

namespace narwhal::router {

ReadmitPlan PlanReadmission(const EngineSnapshot& engine, bool contract_pinned) {
  // Ejected engines the breaker readmits only through an inference probe
  // (ejected by a failed one, or while on an inference hold) count as held.
  const bool inference = engine.state == PlacementState::kHeld ||
                         (engine.state == PlacementState::kEjected && engine.inference_suspect);
  ReadmitPlan plan;
  plan.validation = inference ? ProbeKind::kInference : ProbeKind::kHealth;
  plan.evidence = contract_pinned ? "lifecycle" : inference ? "verification" : "health";
  return plan;
}

absl::StatusOr<ReadmitResult> ValidateAndReadmit(Fleet& fleet, Prober& prober,
                                                 const std::string& iid, bool contract_pinned) {
  if (iid.empty()) return absl::InvalidArgumentError("iid is required");
  const std::optional<EngineSnapshot> found = fleet.Snapshot(iid);
  if (!found) return absl::NotFoundError("no engine " + iid);
  const EngineSnapshot& before = *found;
  ReadmitResult result;
  if (before.state == PlacementState::kServing) return result;
  result.plan = PlanReadmission(before, contract_pinned);
  const ProbeKind validation = result.plan.validation;
  result.probe =
      validation == ProbeKind::kInference
          ? prober.Inference(ProbeTask{0, ProbeKind::kInference, iid}, contract_pinned)
          : prober.Health(engines::EngineTarget{iid, before.settings.url,
                                                before.settings.kv_engine_id},
                          contract_pinned);
  const ProbeResult& r = result.probe;
  if (r.outcome != ProbeOutcome::kPassed) {
    FleetEvent refused;
    refused.kind = FleetEventKind::kEngineReadmitRefused;
    refused.iid = iid;
    refused.cause = "operator";
    refused.probe_kind = validation;
    refused.outcome = r.outcome;
    refused.producer = r.producer;
    refused.detail = r.detail;
    fleet.Publish(refused);
    return absl::FailedPreconditionError(
        "readmission of " + iid + " refused: " + std::string(ProbeKindName(validation)) +
        " validation " + std::string(ProbeOutcomeName(r.outcome)) + ": " + r.detail);
  }
  if (absl::Status s = fleet.Readmit(iid, result.plan.evidence); !s.ok()) return s;
  result.readmitted = true;
  return result;
}

}  // namespace narwhal::router
