// FleetEventCounts: the one place fleet events are counted. Each event the
// fleet publishes passes here once; it feeds the Prometheus counters
// (engine_ejections_total, engine_probes_total, engine_readmissions_total)
// and the per-engine counters the admin API reports (GetBreakers).
// Thread-safe.
#ifndef NARWHAL_ROUTER_FLEET_FLEET_EVENT_COUNTS_H_
#define NARWHAL_ROUTER_FLEET_FLEET_EVENT_COUNTS_H_

#include <map>
#include <mutex>
#include <string>

#include "router/common/metrics.h"
#include "router/fleet/fleet_event.h"

namespace narwhal::router {

// One engine's counts since start.
struct EngineEventCounts {
  long long holds = 0;      // engine_hold_started
  long long ejections = 0;  // engine_ejected
  long long probes = 0;     // settled engine probes (not producer_failed attempts)
  long long probes_failed = 0;
  long long readmissions = 0;
  std::string last_readmission_evidence;
};

class FleetEventCounts {
 public:
  // `metrics` may be null (no Prometheus counters).
  explicit FleetEventCounts(Metrics* metrics) : metrics_(metrics) {}

  void Count(const FleetEvent& e);
  // Per engine iid; engines without a counted event are absent.
  std::map<std::string, EngineEventCounts> Engines() const;

 private:
  Metrics* const metrics_;
  mutable std::mutex mu_;
  std::map<std::string, EngineEventCounts> engines_;
};

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_FLEET_FLEET_EVENT_COUNTS_H_
