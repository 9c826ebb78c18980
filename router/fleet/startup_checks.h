// StartupChecks: the start-up health check of every engine. Until an engine
// has passed a check (this one, a probe, a readmission or a served leg) it
// does not count towards readiness (Fleet::Ready), so /ready and gRPC health
// stay NOT_SERVING while a role has only engines that are dead or still
// loading. Each engine gets its own thread, which repeats GET /health every
// `retry` until it passes (or Stop()); a failure never ejects or holds an
// engine (the breakers decide that from their own evidence). Every outcome
// change is logged with the engine's address and the cause. Once an engine
// passed, its /v1/models tells the fleet the model's max_model_len.
#ifndef NARWHAL_ROUTER_FLEET_STARTUP_CHECKS_H_
#define NARWHAL_ROUTER_FLEET_STARTUP_CHECKS_H_

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "router/fleet/fleet.h"
#include "router/fleet/prober.h"

namespace narwhal::router {

class StartupChecks {
 public:
  StartupChecks(Fleet& fleet, Prober& prober, std::chrono::milliseconds retry);
  ~StartupChecks();  // Stop()
  StartupChecks(const StartupChecks&) = delete;
  StartupChecks& operator=(const StartupChecks&) = delete;

  void Start();
  // Ends the checks still repeating and waits for them.
  void Stop();

 private:
  void Check(size_t index);
  // Reads the engine's max_model_len (/v1/models) into the fleet.
  void LearnModelLen(const engines::EngineTarget& target);

  Fleet& fleet_;
  Prober& prober_;
  const std::chrono::milliseconds retry_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_FLEET_STARTUP_CHECKS_H_
