// Readmission: an operator's request to return an engine to placement
// (SPEC B17; the admin ReadmitEngine RPC). An engine on an inference hold,
// or ejected on inference evidence, returns only through an inference
// probe; any other through a health check. With an engine_contract pinned
// the probe also re-checks it (lifecycle validation). A failed validation
// publishes `engine_readmit_refused` and leaves the engine out.
#ifndef NARWHAL_ROUTER_FLEET_READMISSION_H_
#define NARWHAL_ROUTER_FLEET_READMISSION_H_

#include <absl/status/statusor.h>

#include <string>

#include "router/fleet/fleet_admin.h"
#include "router/fleet/prober.h"

namespace narwhal::router {

// What validation an engine needs before it returns, and the evidence its
// readmission then records.
struct ReadmitPlan {
  ProbeKind validation = ProbeKind::kHealth;  // kHealth | kInference
  std::string evidence;                       // health | verification | lifecycle
};
// Pure: the plan for `engine` (not serving) with or without a pinned contract.
ReadmitPlan PlanReadmission(const EngineSnapshot& engine, bool contract_pinned);

struct ReadmitResult {
  // False when the engine already served (nothing was validated).
  bool readmitted = false;
  ReadmitPlan plan;
  ProbeResult probe;  // the validation's result (readmitted only)
};

// Validates `iid` by `prober` and readmits it into `fleet`: a coroutine (it
// runs the probe) on the caller's loop. NOT_FOUND / INVALID_ARGUMENT for an unknown or empty iid;
// FAILED_PRECONDITION (with the validation's outcome and detail) when the
// validation did not pass.
engines::Awaitable<absl::StatusOr<ReadmitResult>> ValidateAndReadmit(FleetAdmin& fleet,
                                                                     Prober& prober,
                                                                     std::string iid,
                                                                     bool contract_pinned);

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_FLEET_READMISSION_H_
