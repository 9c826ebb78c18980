// FleetAdmin: the fleet as operators and reloads change it (Fleet::admin()):
// the admin service's breaker and membership actions, config reloads, DNS
// groups, readmission, and the read-outs of ListEngines, GetBreakers and
// /metrics. Every call runs under the owner's mutex, which no request takes.
#ifndef NARWHAL_ROUTER_FLEET_FLEET_ADMIN_H_
#define NARWHAL_ROUTER_FLEET_FLEET_ADMIN_H_

#include <absl/status/status.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "router/common/settings.h"
#include "router/fleet/engine_snapshot.h"
#include "router/fleet/fleet_event.h"
#include "router/fleet/fleet_event_counts.h"
#include "router/fleet/membership.h"

namespace narwhal::router {

class FleetAdmin {
 public:
  virtual ~FleetAdmin() = default;

  // --- settings (B20) ---
  virtual std::shared_ptr<const Settings> settings() const = 0;
  // A reload's settings: recovery, links, placement and membership for what
  // follows. Engines are reconciled separately (Reconcile).
  virtual void ApplySettings(std::shared_ptr<const Settings> settings) = 0;
  virtual void SetMembershipOptions(const MembershipOptions& options) = 0;

  // --- operators' breaker actions ---
  virtual absl::Status Eject(const std::string& iid, const std::string& detail) = 0;
  virtual absl::Status Drain(const std::string& iid) = 0;
  // Back into placement after the caller's validation passed.
  virtual absl::Status Readmit(const std::string& iid, const std::string& evidence) = 0;
  virtual absl::Status ReleaseQuarantine(const std::string& iid) = 0;
  // The role ("prefill" or "decode") for which `iid` is the last engine in
  // placement now, or "" (operators are asked to confirm such a removal).
  virtual std::string LastInPlacement(const std::string& iid) const = 0;

  // --- membership (B21-B25) ---
  // A new engine joins: `joining` until its join checks pass (B22).
  // ALREADY_EXISTS for an iid in the fleet.
  virtual absl::Status AddEngine(const EngineSettings& engine, const MemberSource& source) = 0;
  // Engine `iid` leaves (B23). NOT_FOUND for an unknown iid;
  // FAILED_PRECONDITION when it comes from another source than `by`.
  virtual absl::Status RemoveEngine(const std::string& iid, const MemberSource& by) = 0;
  // Makes `source`'s members what `desired` says (B21): new iids join, iids
  // gone leave, a changed url, role or kv_engine_id leaves and joins again;
  // the rest keep every state. Iids of other sources are skipped (logged).
  virtual MembershipChange Reconcile(const MemberSource& source,
                                     const std::vector<EngineSettings>& desired) = 0;

  // --- read-outs ---
  virtual bool Contains(const std::string& iid) const = 0;
  virtual std::optional<EngineSnapshot> Snapshot(const std::string& iid) const = 0;
  virtual std::vector<EngineSnapshot> Snapshot() const = 0;
  virtual std::vector<LinkSnapshot> Links() const = 0;
  // Each engine's event counts since start (GetBreakers).
  virtual std::map<std::string, EngineEventCounts> EventCounts() const = 0;
  // Refreshes every engine's gauges (time-based states such as a quarantine
  // expire without an event); called before metrics are scraped.
  virtual void PublishAll() = 0;
  // Publishes an event that is not a breaker or link change (a preflight
  // run, a refused readmission): counted once (metrics and the admin
  // counters), logged, published typed to the event bus and journaled.
  virtual void Publish(const FleetEvent& event) = 0;
};

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_FLEET_FLEET_ADMIN_H_
