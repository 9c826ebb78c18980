// The kinds of fleet event and the hold kinds they name, as enums. The
// books (breaker_book, link_book) and the fleet carry these; only the
// serializers (router/fleet/fleet_event.cc: journal and log; the admin
// mappers) turn them into their wire names, which never change.
#ifndef NARWHAL_ROUTER_FLEET_FLEET_EVENT_KIND_H_
#define NARWHAL_ROUTER_FLEET_FLEET_EVENT_KIND_H_

#include <string_view>

namespace narwhal::router {

enum class FleetEventKind {
  kEngineHoldStarted,     // engine_hold_started
  kEngineHoldEnded,       // engine_hold_ended
  kEngineHoldSuppressed,  // engine_hold_suppressed
  kEngineEjected,         // engine_ejected
  kEngineReadmitted,      // engine_readmitted
  kEngineProbe,           // engine_probe
  kEngineDrained,         // engine_drained
  kEngineReadmitRefused,  // engine_readmit_refused
  kLinkHeld,              // link_held
  kLinkProbe,             // link_probe
  kLinkReadmitted,        // link_readmitted
  kPreflight,             // preflight
  kEngineJoined,          // engine_joined
  kEngineJoinFailed,      // engine_join_failed
  kEngineLeft,            // engine_left
};
inline constexpr FleetEventKind kAllFleetEventKinds[] = {
    FleetEventKind::kEngineHoldStarted,
    FleetEventKind::kEngineHoldEnded,
    FleetEventKind::kEngineHoldSuppressed,
    FleetEventKind::kEngineEjected,
    FleetEventKind::kEngineReadmitted,
    FleetEventKind::kEngineProbe,
    FleetEventKind::kEngineDrained,
    FleetEventKind::kEngineReadmitRefused,
    FleetEventKind::kLinkHeld,
    FleetEventKind::kLinkProbe,
    FleetEventKind::kLinkReadmitted,
    FleetEventKind::kPreflight,
    FleetEventKind::kEngineJoined,
    FleetEventKind::kEngineJoinFailed,
    FleetEventKind::kEngineLeft,
};
// The kind's wire name (the event's `event` field, Event.kind).
std::string_view FleetEventKindName(FleetEventKind kind);

// Which hold a hold event is about.
enum class HoldKind { kNone, kTimed, kInference };
// "timed", "inference"; "" for kNone.
std::string_view HoldKindName(HoldKind kind);

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_FLEET_FLEET_EVENT_KIND_H_
