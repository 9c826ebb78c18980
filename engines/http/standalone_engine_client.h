// StandaloneEngineClient: the blocking engine port over the HTTP adapter,
// with its own event loop — for tools (narwhal-check) and tests that have no
// loops of their own.
#ifndef NARWHAL_ENGINES_HTTP_STANDALONE_ENGINE_CLIENT_H_
#define NARWHAL_ENGINES_HTTP_STANDALONE_ENGINE_CLIENT_H_

#include <string>
#include <string_view>

#include "engines/clock.h"
#include "engines/http/beast_engine_client.h"
#include "engines/http/io_loops.h"
#include "engines/sync_engine_client.h"

namespace narwhal::engines {

class StandaloneEngineClient : public EngineClient {
 public:
  explicit StandaloneEngineClient(HttpEngineClientOptions options)
      : async_(std::move(options), clock_), sync_(async_, loops_.executor(0)) {}

  PrefillOutcome Prefill(const EngineTarget& producer, Api api, const nlohmann::json& body,
                         const LegOptions& options) override {
    return sync_.Prefill(producer, api, body, options);
  }
  DecodeOutcome Decode(const EngineTarget& consumer, const PrefillResult& handoff,
                       const nlohmann::json& body, bool client_streams, const LegOptions& options,
                       DecodeObserver& observer) override {
    return sync_.Decode(consumer, handoff, body, client_streams, options, observer);
  }
  ControlResponse Control(const EngineTarget& engine, std::string_view method,
                          std::string_view path, const std::string& body,
                          double timeout_s) override {
    return sync_.Control(engine, method, path, body, timeout_s);
  }
  std::shared_ptr<const HttpEngineClientOptions> options() const { return async_.options(); }

 private:
  RealClock clock_;
  IoLoops loops_{1};
  BeastEngineClient async_;
  SyncEngineClient sync_;
};

}  // namespace narwhal::engines

#endif  // NARWHAL_ENGINES_HTTP_STANDALONE_ENGINE_CLIENT_H_
