// FleetMonitor: the control-plane loop that keeps breaker state moving, a
// coroutine on the owner's loop timed by the injected clock. Every tick it
// asks the Fleet for due probes (holds, ejections, health probes, liveness
// sweeps), link probes, join checks (B22) and the silent-recompute scrapes
// of consumers (router/fleet/kv_recompute.h), runs each as a coroutine of
// its own over the async engine port (so one slow engine never delays
// another's probe, and no thread waits on an engine), and sweeps the
// engines that left (B23). With a KV-event subscriber, each tick also hands
// it the members that publish events when they changed (SPEC §14).
#ifndef NARWHAL_ROUTER_FLEET_FLEET_MONITOR_H_
#define NARWHAL_ROUTER_FLEET_FLEET_MONITOR_H_

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "engines/cancel_token.h"
#include "router/fleet/fleet_control.h"
#include "router/fleet/kv_subscriber.h"
#include "router/fleet/prober.h"
#include "router/fleet/spawned_tasks.h"

namespace narwhal::router {

class FleetMonitor {
 public:
  // The loop and its probes run on `executor`; ticks are `tick` apart on the
  // prober's clock.
  FleetMonitor(FleetControl& fleet, Prober& prober, engines::Executor executor,
               engines::MonoClock::duration tick = std::chrono::milliseconds(100));
  ~FleetMonitor();  // Stop()
  FleetMonitor(const FleetMonitor&) = delete;
  FleetMonitor& operator=(const FleetMonitor&) = delete;

  // The KV-event subscriber that follows the fleet's members (may be null).
  // Before Start().
  void SetKvSubscriber(kv::KvSubscriber* subscriber) { kv_ = subscriber; }
  // Starts the loop (again after a Stop()).
  void Start();
  // Ends the loop and waits for the probes in flight (each bounded by its
  // timeouts). Not from the executor's thread.
  void Stop();
  // Probes (and the loop itself) running now.
  size_t running() const { return tasks_.running(); }

 private:
  engines::Awaitable<void> Loop(engines::CancelToken* stop);

  // Hands the subscriber the members' KV-event endpoints when they changed.
  void FollowKvEndpoints();

  FleetControl& fleet_;
  Prober& prober_;
  kv::KvSubscriber* kv_ = nullptr;
  std::optional<std::vector<KvEndpoint>> kv_endpoints_;  // last handed over
  const engines::MonoClock::duration tick_;
  SpawnedTasks tasks_;
  std::mutex mu_;
  std::unique_ptr<engines::CancelToken> stop_;  // set while started
};

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_FLEET_FLEET_MONITOR_H_
