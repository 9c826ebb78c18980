// EngineSnapshot and LinkSnapshot: read-only views of one engine and one
// producer->consumer link, as the admin API, /ready and the probes read them.
#ifndef NARWHAL_ROUTER_FLEET_ENGINE_SNAPSHOT_H_
#define NARWHAL_ROUTER_FLEET_ENGINE_SNAPSHOT_H_

#include <array>
#include <cstddef>
#include <optional>
#include <string>

#include "engines/engine_failure.h"
#include "router/common/settings.h"
#include "router/fleet/breaker_book.h"
#include "router/fleet/fleet_event_kind.h"
#include "router/fleet/link_book.h"

namespace narwhal::router {

// A read-only view of one producer→consumer link (admin API, tests).
struct LinkSnapshot {
  std::string producer;
  std::string consumer;
  LinkState state = LinkState::kServing;
  double since = 0;  // unix seconds the state began
  std::string cause;
  int streak = 0;
  long long successes = 0;
  long long failures = 0;
  std::optional<double> last_success_age_s;
  std::optional<double> last_failure_age_s;
  std::string last_failure;
  std::optional<double> next_probe_in_s;
  int probe_failures = 0;
  bool probe_running = false;
};

// A read-only view of one engine (admin API, /ready, tests).
struct EngineSnapshot {
  EngineSettings settings;
  PlacementState state = PlacementState::kServing;
  // Where it comes from: "file", "dns:<group iid>" or "admin".
  std::string source;
  std::array<int, engines::kBreakerClassCount> streak{};
  int inflight_prefill = 0;
  int inflight_decode = 0;
  // Decode legs placed here whose prefill still runs.
  int reserved_decode = 0;
  // Entries of its prefix index (cache_aware placement; 0 otherwise).
  size_t prefix_index_chunks = 0;
  // The hold keeping it out, if any: kTimed (quarantine) or kInference.
  HoldKind hold_kind = HoldKind::kNone;
  std::optional<double> hold_remaining_s;  // timed holds only
  std::string hold_cause;
  std::optional<double> held_for_s;
  // Ejection (the cause is set while ejected).
  std::optional<EjectCause> ejection_cause;
  std::string ejection_detail;
  std::optional<double> ejected_for_s;
  std::optional<EjectCause> last_ejection_cause;
  // Ejected and readmitted only through an inference probe (ejected by a
  // failed one, or while on an inference hold).
  bool inference_suspect = false;
  // Probes (kind and outcome are set once one ran).
  std::optional<ProbeKind> last_probe_kind;
  std::optional<ProbeOutcome> last_probe_outcome;
  std::string last_probe_detail;
  std::optional<double> last_probe_age_s;
  std::optional<double> next_probe_in_s;
  int probe_failures = 0;
  bool probe_running = false;
  int liveness_misses = 0;
  // Why it is out of placement, in one sentence ("" when serving).
  std::string explanation;
};

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_FLEET_ENGINE_SNAPSHOT_H_
