// StandaloneEngineClient: the HTTP adapter with an event loop of its own,
// for tools (narwhal-check) and tests that have no loops: async() and
// executor() run the control plane's legs (preflight, contract checks,
// probes) on it, waited for with engines::RunBlocking from other threads.
#ifndef NARWHAL_ENGINES_HTTP_STANDALONE_ENGINE_CLIENT_H_
#define NARWHAL_ENGINES_HTTP_STANDALONE_ENGINE_CLIENT_H_

#include <utility>

#include "engines/clock.h"
#include "engines/http/beast_engine_client.h"
#include "engines/http/io_loops.h"

namespace narwhal::engines {

class StandaloneEngineClient {
 public:
  explicit StandaloneEngineClient(HttpEngineClientOptions options)
      : async_(std::move(options), clock_) {}

  AsyncEngineClient& async() { return async_; }
  Executor executor() { return loops_.executor(0); }

 private:
  RealClock clock_;
  IoLoops loops_{1};
  BeastEngineClient async_;
};

}  // namespace narwhal::engines

#endif  // NARWHAL_ENGINES_HTTP_STANDALONE_ENGINE_CLIENT_H_
