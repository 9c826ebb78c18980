// FleetEvent: one typed fleet event (a breaker or link change, a probe, a
// refused readmission, a preflight run, a join or leave). The fleet
// publishes these typed to the event bus; the serializer here turns one into
// its wire form at the edges — the JSON object the journal and the log carry
// (`event`, `at`, `iid` and the kind's fields), whose names and fields never
// change — and chooses its log level. The admin API maps the typed event
// itself (server/admin/admin_mappers).
#ifndef NARWHAL_ROUTER_FLEET_FLEET_EVENT_H_
#define NARWHAL_ROUTER_FLEET_FLEET_EVENT_H_

#include <cstddef>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "router/common/log.h"
#include "router/fleet/breaker_book.h"
#include "router/fleet/fleet_event_kind.h"
#include "router/fleet/link_book.h"
#include "router/fleet/preflight.h"

namespace narwhal::router {

// What a `preflight` event says about one run.
struct PreflightSummary {
  bool passed = false;
  std::string trigger;  // startup | admin
  PairMode pairs = PairMode::kMesh;
  double duration_s = 0;
  std::map<std::string, std::string> gates = {};  // gate -> passed | failed | skipped
  size_t transfers = 0;
  int transfers_passed = 0;
};

struct FleetEvent {
  FleetEventKind kind = FleetEventKind::kEngineProbe;
  // The engine (a link event's consumer); empty for preflight.
  std::string iid;
  HoldKind hold_kind = HoldKind::kNone;
  std::string cause;
  std::string evidence;
  std::optional<ProbeKind> probe_kind;
  std::optional<ProbeOutcome> outcome;           // engine probes, refused readmissions
  std::optional<LinkProbeOutcome> link_outcome;  // link probes
  std::string producer;
  std::string consumer;  // link events
  std::string detail;
  std::optional<PreflightSummary> preflight;  // kPreflight
  // Membership events: where the engine comes from ("file", "dns:<group>",
  // "admin") and its url.
  std::string source;
  std::string url;
};

FleetEvent FromBreakerEvent(const BreakerEvent& e);
FleetEvent FromLinkEvent(const LinkEvent& e);
// The `preflight` event of one run: outcome, a one-line detail and each
// gate's result.
FleetEvent PreflightEvent(const PreflightReport& report, const std::string& trigger);

// The wire form, stamped `at` (unix seconds); the bus adds `seq`.
nlohmann::json FleetEventJson(const FleetEvent& e, double at);
// Passed liveness sweeps are debug (one per engine per interval); setbacks
// (ejections, holds, refused readmissions, failed probes or preflights) are
// warnings; the rest info.
LogLevel FleetEventLogLevel(const FleetEvent& e);

// A passing liveness sweep: routine, not a state change. It is counted
// (narwhal_engine_probes_total) and logged at debug, but never journaled nor
// streamed to WatchEvents, so that the event history holds state changes
// and failures rather than a probe every liveness_interval_s per engine.
bool IsRoutineFleetEvent(const FleetEvent& e);

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_FLEET_FLEET_EVENT_H_
