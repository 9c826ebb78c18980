// BlockingLegs: a test's thread runs single legs of the real adapter and
// waits for each (engines::RunBlocking on one of the adapter's loops): for
// adapter tests that assert on one leg's outcome. Never from a loop thread.
#ifndef NARWHAL_TESTS_FAKES_BLOCKING_LEGS_H_
#define NARWHAL_TESTS_FAKES_BLOCKING_LEGS_H_

#include <string>
#include <string_view>
#include <utility>

#include "engines/engine_client.h"
#include "engines/run_blocking.h"

namespace narwhal::testing {

class BlockingLegs {
 public:
  BlockingLegs(engines::AsyncEngineClient& client, engines::Executor executor)
      : client_(client), executor_(std::move(executor)) {}

  engines::PrefillOutcome Prefill(const engines::EngineTarget& producer, engines::Api api,
                                  const nlohmann::json& body, const engines::LegOptions& options) {
    return engines::RunBlocking(executor_, client_.Prefill(producer, api, body, options));
  }
  engines::DecodeOutcome Decode(const engines::EngineTarget& consumer,
                                const engines::PrefillResult& handoff, const nlohmann::json& body,
                                bool client_streams, const engines::LegOptions& options,
                                engines::DecodeObserver& observer) {
    return engines::RunBlocking(
        executor_, client_.Decode(consumer, handoff, body, client_streams, options, observer));
  }
  engines::ControlResponse Control(const engines::EngineTarget& engine, std::string_view method,
                                   std::string_view path, const std::string& body,
                                   double timeout_s) {
    return engines::RunBlocking(executor_, client_.Control(engine, std::string(method),
                                                           std::string(path), body, timeout_s));
  }
  engines::AsyncEngineClient& async() { return client_; }
  const engines::Executor& executor() const { return executor_; }

 private:
  engines::AsyncEngineClient& client_;
  engines::Executor executor_;
};

}  // namespace narwhal::testing

#endif  // NARWHAL_TESTS_FAKES_BLOCKING_LEGS_H_
