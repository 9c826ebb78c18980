// Waiting for engines that are still starting, before a preflight
// (narwhal-serve --preflight-wait-s, narwhal-check --wait-s).
//
// An engine is still loading while GET /health or GET /v1/models is refused
// (nothing listens on its port yet) or answers 503 (the server is up, the
// model is not). WaitForEngines polls every engine that is not yet up, one
// round every `interval_s`, until every engine has answered both with
// something other than a loading answer (200, or a real failure such as a
// wrong model, that the preflight then reports) or `timeout_s` has passed.
// It never fails by itself: the preflight that follows reports exactly what
// it would have reported without the wait. A timeout of 0 polls nothing.
#ifndef NARWHAL_ROUTER_FLEET_ENGINE_WAIT_H_
#define NARWHAL_ROUTER_FLEET_ENGINE_WAIT_H_

#include <functional>
#include <string>
#include <vector>

#include "engines/engine_client.h"
#include "router/common/clock.h"
#include "router/common/settings.h"

namespace narwhal::router {

// True for an answer that means "still starting": connection refused, or
// HTTP 503.
bool IsLoadingAnswer(const engines::ControlResponse& response);

struct EngineWaitResult {
  // Every engine left the loading state before the timeout.
  bool settled = true;
  // Clock time spent waiting.
  double waited_s = 0;
  // Polling rounds run (0 when the timeout is 0).
  int rounds = 0;
  // The engines still loading when the wait ended, in config order.
  std::vector<std::string> still_loading;
  // `sleep` returned false.
  bool interrupted = false;
};

// Blocks the calling thread (before serving; never an event loop's own):
// each look runs on `executor`, and `sleep` waits the given seconds (a real
// sleep in the binaries, a fake-clock advance in tests) and returns false to
// stop the wait at once (a signal arrived; *interrupted is then set). Logs
// when the wait starts, each engine that comes up (or stops loading with a
// failure) and how it ended.
EngineWaitResult WaitForEngines(const Settings& settings, engines::AsyncEngineClient& client,
                                const engines::Executor& executor, const Clock& clock,
                                const std::function<bool(double)>& sleep, double timeout_s,
                                double interval_s = 1.0);

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_FLEET_ENGINE_WAIT_H_
