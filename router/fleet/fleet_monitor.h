// FleetMonitor: the background loop that keeps breaker state moving. Every
// tick it asks the Fleet for due probes (holds, ejections, health probes,
// liveness sweeps) and expired quarantines, and runs each probe on its own
// bounded pool so one slow engine never delays another's probe. It also
// scrapes each consumer's /metrics every Fleet::kRecomputeScrapeIntervalS
// for its failed-transfer counter (router/fleet/kv_recompute.h).
#ifndef NARWHAL_ROUTER_FLEET_FLEET_MONITOR_H_
#define NARWHAL_ROUTER_FLEET_FLEET_MONITOR_H_

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "router/fleet/fleet.h"
#include "router/fleet/prober.h"
#include "router/fleet/worker_pool.h"

namespace narwhal::router {

class FleetMonitor {
 public:
  FleetMonitor(Fleet& fleet, Prober& prober,
               std::chrono::milliseconds tick = std::chrono::milliseconds(100),
               size_t probe_threads = 8);
  ~FleetMonitor();  // Stop()
  // Starts the loop (again after a Stop()).
  void Start();
  // Stops the loop and waits for running probes.
  void Stop();

 private:
  void Loop();

  Fleet& fleet_;
  Prober& prober_;
  const std::chrono::milliseconds tick_;
  const size_t probe_threads_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
  std::unique_ptr<WorkerPool> probes_;
};

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_FLEET_FLEET_MONITOR_H_
