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

engines::Awaitable<absl::StatusOr<ReadmitResult>> ValidateAndReadmit(FleetAdmin& fleet,
                                                                     Prober& prober,
                                                                     std::string iid,
                                                                     bool contract_pinned) {
  if (iid.empty()) co_return absl::InvalidArgumentError("iid is required");
  const std::optional<EngineSnapshot> found = fleet.Snapshot(iid);
  if (!found) co_return absl::NotFoundError("no engine " + iid);
  const EngineSnapshot& before = *found;
  ReadmitResult result;
  if (before.state == PlacementState::kServing) co_return result;
  result.plan = PlanReadmission(before, contract_pinned);
  const ProbeKind validation = result.plan.validation;
  // Named, not braced temporaries: g++ 12 destroys a braced temporary
  // passed by value to a coroutine twice.
  if (validation == ProbeKind::kInference) {
    const ProbeTask task{0, ProbeKind::kInference, iid};
    result.probe = co_await prober.Inference(task, contract_pinned);
  } else {
    const engines::EngineTarget target{iid, before.settings.url, before.settings.kv_engine_id};
    result.probe = co_await prober.Health(target, contract_pinned);
  }
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
    co_return absl::FailedPreconditionError(
        "readmission of " + iid + " refused: " + std::string(ProbeKindName(validation)) +
        " validation " + std::string(ProbeOutcomeName(r.outcome)) + ": " + r.detail);
  }
  if (absl::Status s = fleet.Readmit(iid, result.plan.evidence); !s.ok()) co_return s;
  result.readmitted = true;
  co_return result;
}

}  // namespace narwhal::router
