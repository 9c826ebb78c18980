// PlacementView: an immutable snapshot of the fleet for placement — the
// engines in the fleet with when each is in placement, the held links, the
// whole-wave hold and what readiness needs. The fleet's owner builds a new
// view after every change that moves placement and publishes it with one
// atomic swap (Fleet::View); a request reads one view for a placement
// decision and never takes a lock shared by all requests (the per-engine
// load counters it reads and writes are atomics of the EngineRecords).
//
// Time-based states need no new view: an engine under a timed quarantine is
// listed with the time its quarantine ends, and is in placement from then.
#ifndef NARWHAL_ROUTER_FLEET_PLACEMENT_VIEW_H_
#define NARWHAL_ROUTER_FLEET_PLACEMENT_VIEW_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "router/fleet/engine_record.h"

namespace narwhal::router {

using engines::MonoTime;

struct ViewEngine {
  EngineRef engine;
  // In placement from this time on (MonoTime::min(): now; the end of a
  // timed quarantine; MonoTime::max(): held, ejected, drained or leaving).
  MonoTime serving_from = MonoTime::min();
  // Passed a check since it joined (counts towards readiness).
  bool checked = false;
};

class PlacementView {
 public:
  uint64_t version = 0;
  std::vector<ViewEngine> engines;
  // Under whole_wave: the ejected engine holding the fleet, else empty.
  std::string wave_hold;
  // Held producer->consumer links, sorted.
  std::vector<std::pair<std::string, std::string>> held_links;
  // How prefill legs are placed (the config generation the owner follows).
  PlacementSettings placement;

  // Role permits and in placement at `now`, whatever a whole-wave hold says.
  static bool Serves(const ViewEngine& e, Phase phase, MonoTime now);
  // Serves() and no whole-wave hold.
  bool Eligible(const ViewEngine& e, Phase phase, MonoTime now) const;
  bool LinkHeld(std::string_view producer, std::string_view consumer) const;
  // Whether a leg of `phase` could be placed outside `excluded` at `now`.
  bool CanPlace(Phase phase, const std::vector<std::string>& excluded, MonoTime now) const;
  // True when every role has an engine in placement that passed a check;
  // else *why (may be null) says which not.
  bool Ready(MonoTime now, std::string* why) const;
  const ViewEngine* Find(std::string_view iid) const;
  // Engines serving a role (probes: whole-wave holds ignored), `except`
  // left out: producers by fewest prefill legs then iid; the consumer with
  // the fewest decode legs.
  std::vector<engines::EngineTarget> LiveProducers(std::string_view except, MonoTime now) const;
  std::optional<engines::EngineTarget> LiveConsumer(std::string_view except, MonoTime now) const;
};

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_FLEET_PLACEMENT_VIEW_H_
