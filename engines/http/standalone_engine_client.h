// StandaloneEngineClient: the HTTP adapter with an event loop of its own,
// for tools (narwhal-check) and tests that have no loops: async() and
// executor() run coroutines of the control plane (preflight, contract
// checks) on it, and the blocking calls wait for one leg (RunBlocking).
#ifndef NARWHAL_ENGINES_HTTP_STANDALONE_ENGINE_CLIENT_H_
#define NARWHAL_ENGINES_HTTP_STANDALONE_ENGINE_CLIENT_H_

#include <memory>
#include <string>
#include <string_view>

#include "engines/clock.h"
#include "engines/http/beast_engine_client.h"
#include "engines/http/io_loops.h"
#include "engines/run_blocking.h"

namespace narwhal::engines {

class StandaloneEngineClient {
 public:
  explicit StandaloneEngineClient(HttpEngineClientOptions options)
      : async_(std::move(options), clock_) {}

  PrefillOutcome Prefill(const EngineTarget& producer, Api api, const nlohmann::json& body,
                         const LegOptions& options) {
    return RunBlocking(executor(), async_.Prefill(producer, api, body, options));
  }
  DecodeOutcome Decode(const EngineTarget& consumer, const PrefillResult& handoff,
                       const nlohmann::json& body, bool client_streams, const LegOptions& options,
                       DecodeObserver& observer) {
    return RunBlocking(executor(),
                       async_.Decode(consumer, handoff, body, client_streams, options, observer));
  }
  ControlResponse Control(const EngineTarget& engine, std::string_view method,
                          std::string_view path, const std::string& body, double timeout_s) {
    return RunBlocking(executor(), async_.Control(engine, std::string(method), std::string(path),
                                                  body, timeout_s));
  }
  std::shared_ptr<const HttpEngineClientOptions> options() const { return async_.options(); }
  AsyncEngineClient& async() { return async_; }
  Executor executor() { return loops_.executor(0); }

 private:
  RealClock clock_;
  IoLoops loops_{1};
  BeastEngineClient async_;
};

}  // namespace narwhal::engines

#endif  // NARWHAL_ENGINES_HTTP_STANDALONE_ENGINE_CLIENT_H_
