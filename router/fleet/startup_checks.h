// StartupChecks: the start-up health check of every engine. Until an engine
// has passed a check (this one, a probe, a readmission or a served leg) it
// does not count towards readiness (Fleet::Ready), so /ready and gRPC health
// stay NOT_SERVING while a role has only engines that are dead or still
// loading. A failure never ejects or holds an engine (the breakers decide
// that from their own evidence). Every outcome change is logged with the
// engine's address and the cause. Once an engine passed, its /v1/models
// tells the fleet the model's max_model_len.
//
// Threads do not grow with the fleet: at most `max_threads` checker threads
// (kMaxThreads by default, fewer when there are fewer engines) take the
// engines still unchecked in turn, one check (GET /health and the served
// model) at a time each. The line starts with the roles interleaved (the
// first prefill engine, the first decode engine, ...) so that every role
// gets its first checks early; a failed engine goes to the back and is
// checked again no sooner than `retry` after that failure, as time goes on
// the prober's clock. An engine that left the fleet is dropped; one that
// passed another check meanwhile only has its max_model_len read. Checker
// threads end as the line shrinks (no more idle checkers than engines
// waiting; none once every engine passed); Stop() wakes the idle ones at
// once and waits for checks in progress (each bounded by
// engine.health_timeout_s).
#ifndef NARWHAL_ROUTER_FLEET_STARTUP_CHECKS_H_
#define NARWHAL_ROUTER_FLEET_STARTUP_CHECKS_H_

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "router/common/clock.h"
#include "router/fleet/fleet.h"
#include "router/fleet/prober.h"

namespace narwhal::router {

class StartupChecks {
 public:
  static constexpr size_t kMaxThreads = 16;

  // `poll` bounds each real-time wait of an idle checker before it reads the
  // prober's clock again (a test clock moves without waking anyone); with the
  // real clock a checker waits exactly until the next engine is due.
  StartupChecks(Fleet& fleet, Prober& prober, std::chrono::milliseconds retry,
                size_t max_threads = kMaxThreads,
                std::chrono::milliseconds poll = std::chrono::seconds(1));
  ~StartupChecks();  // Stop()
  StartupChecks(const StartupChecks&) = delete;
  StartupChecks& operator=(const StartupChecks&) = delete;

  // Checks every engine of the fleet that has not passed a check yet; no-op
  // until Stop() once started.
  void Start();
  // Ends the checks still repeating and waits for the checker threads.
  void Stop();
  // The checker threads running now (ended ones are joined by Stop()).
  size_t running() const;
  // Engines waiting in line for their next check (not the ones being
  // checked right now).
  size_t waiting() const;

 private:
  // One engine waiting for its check.
  struct Pending {
    std::string iid;
    MonoTime due;
    int attempts = 0;
    std::string last_failure;  // the last failure logged
  };

  void Checker();
  // One check of `p`: true when the engine needs no more (passed, checked
  // by something else, or gone).
  bool CheckOnce(Pending& p);
  // Reads the engine's max_model_len (/v1/models) into the fleet.
  void LearnModelLen(const engines::EngineTarget& target);

  Fleet& fleet_;
  Prober& prober_;
  const Clock& clock_;
  const std::chrono::milliseconds retry_;
  const size_t max_threads_;
  const std::chrono::milliseconds poll_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::deque<Pending> queue_;  // by due time, earliest first
  size_t idle_ = 0;            // checkers waiting for the next due engine
  size_t running_ = 0;         // checkers not yet returned
  std::vector<std::thread> threads_;
};

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_FLEET_STARTUP_CHECKS_H_
