// Fleet views (router/fleet/fleet.h snapshots, events, preflight reports) to the
// admin API's messages (narwhal.admin.v1). Pure: no locks, no I/O.
#ifndef NARWHAL_SERVER_ADMIN_ADMIN_MAPPERS_H_
#define NARWHAL_SERVER_ADMIN_ADMIN_MAPPERS_H_

#include <nlohmann/json.hpp>
#include <string>

#include "narwhal/admin/v1/admin.pb.h"
#include "router/common/settings.h"
#include "router/fleet/event_bus.h"
#include "router/fleet/fleet.h"
#include "router/fleet/fleet_event_counts.h"
#include "router/fleet/preflight.h"

namespace narwhal::server {

// A published fleet event (router/fleet/event_bus.h) to Event: its typed
// fields, and in Event.fields only what they do not cover (a link event's
// consumer, a preflight run's summary).
void FillEvent(const router::PublishedEvent& event, narwhal::admin::v1::Event* out);
void FillEngine(const router::EngineSnapshot& s, narwhal::admin::v1::Engine* out);
void FillBreakerEntry(const router::EngineSnapshot& s, const router::EngineEventCounts& counts,
                      narwhal::admin::v1::BreakerEntry* out);
void FillPolicy(const router::RecoverySettings& r, narwhal::admin::v1::RecoveryPolicy* out);
void FillQuarantine(const router::EngineSnapshot& s, narwhal::admin::v1::QuarantineEntry* out);
void FillLink(const router::LinkSnapshot& l, narwhal::admin::v1::Link* out);
void FillReport(const router::PreflightReport& r, const std::string& trigger,
                narwhal::admin::v1::PreflightReport* out);

}  // namespace narwhal::server

#endif  // NARWHAL_SERVER_ADMIN_ADMIN_MAPPERS_H_
