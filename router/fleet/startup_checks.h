// StartupChecks: the start-up health check of every engine. Until an engine
// has passed a check (this one, a probe, a readmission or a served leg) it
// does not count towards readiness (Fleet::Ready), so /ready and gRPC health
// stay NOT_SERVING while a role has only engines that are dead or still
// loading. A failure never ejects or holds an engine (the breakers decide
// that from their own evidence). Every outcome change is logged with the
// engine's address and the cause. Once an engine passed, its /v1/models
// tells the fleet the model's max_model_len.
//
// The checks are coroutines on the owner's loop, over the async engine port:
// at most `max_checkers` (kMaxCheckers by default, fewer when there are fewer
// engines) take the engines still unchecked in turn, one check (GET /health
// and the served model) at a time each. The line starts with the roles
// interleaved (the first prefill engine, the first decode engine, ...) so
// that every role gets its first checks early; a failed engine goes to the
// back and is checked again no sooner than `retry` after that failure, on
// the prober's clock (an idle checker sleeps on that clock until the next
// engine is due). An engine that left the fleet is dropped; one that passed
// another check meanwhile only has its max_model_len read. Checkers end as
// the line shrinks (no more idle checkers than engines waiting; none once
// every engine passed); Stop() wakes the idle ones at once and waits for
// checks in progress (each bounded by engine.health_timeout_s).
#ifndef NARWHAL_ROUTER_FLEET_STARTUP_CHECKS_H_
#define NARWHAL_ROUTER_FLEET_STARTUP_CHECKS_H_

#include <chrono>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <string>

#include "router/common/clock.h"
#include "router/fleet/fleet_control.h"
#include "router/fleet/prober.h"
#include "router/fleet/spawned_tasks.h"

namespace narwhal::router {

class StartupChecks {
 public:
  static constexpr size_t kMaxCheckers = 16;

  // The checks run on `executor`.
  StartupChecks(FleetControl& fleet, Prober& prober, engines::Executor executor,
                engines::MonoClock::duration retry, size_t max_checkers = kMaxCheckers);
  ~StartupChecks();  // Stop()
  StartupChecks(const StartupChecks&) = delete;
  StartupChecks& operator=(const StartupChecks&) = delete;

  // Checks every engine of the fleet that has not passed a check yet; no-op
  // until Stop() once started.
  void Start();
  // Ends the checks still repeating and waits for the checkers. Not from
  // the executor's thread.
  void Stop();
  // The checkers running now.
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

  engines::Awaitable<void> Checker(engines::CancelToken* stop);
  // One check of `p`: true when the engine needs no more (passed, checked
  // by something else, or gone).
  engines::Awaitable<bool> CheckOnce(Pending& p);
  // Reads the engine's max_model_len (/v1/models) into the fleet.
  engines::Awaitable<void> LearnModelLen(engines::EngineTarget target);

  FleetControl& fleet_;
  Prober& prober_;
  const Clock& clock_;
  const engines::MonoClock::duration retry_;
  const size_t max_checkers_;
  SpawnedTasks tasks_;
  mutable std::mutex mu_;  // the fields below (tests read them from other threads)
  std::unique_ptr<engines::CancelToken> stop_;  // set while started
  std::deque<Pending> queue_;                   // by due time, earliest first
  size_t idle_ = 0;                             // checkers waiting for the next due engine
};

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_FLEET_STARTUP_CHECKS_H_
