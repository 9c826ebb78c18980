// SyncEngineClient: the blocking engine port (EngineClient) over the
// event-loop adapter (AsyncEngineClient), for threads that may block: breaker
// probes, preflight, narwhal-check, tools, tests.
//
// Each call runs the leg as a coroutine on `executor` (an event loop this
// thread does not run) and waits for it. A DecodeObserver passed to Decode()
// runs on that loop. Never call it from a loop thread: it would wait for
// itself.
#ifndef NARWHAL_ENGINES_SYNC_ENGINE_CLIENT_H_
#define NARWHAL_ENGINES_SYNC_ENGINE_CLIENT_H_

#include <future>
#include <string>
#include <utility>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>

#include "engines/clock.h"
#include "engines/engine_client.h"

namespace narwhal::engines {

// Runs `make()` (a function returning an Awaitable<T>) on `executor` and
// waits for its result.
template <typename T, typename Make>
T RunBlocking(const Executor& executor, Make make) {
  std::promise<T> promise;
  std::future<T> future = promise.get_future();
  boost::asio::co_spawn(
      executor,
      [make = std::move(make), &promise]() mutable -> Awaitable<void> {
        promise.set_value(co_await make());
      },
      boost::asio::detached);
  return future.get();
}

class SyncEngineClient : public EngineClient {
 public:
  SyncEngineClient(AsyncEngineClient& client, Executor executor)
      : client_(client), executor_(std::move(executor)) {}

  PrefillOutcome Prefill(const EngineTarget& producer, Api api, const nlohmann::json& body,
                         const LegOptions& options) override {
    return RunBlocking<PrefillOutcome>(
        executor_, [&] { return client_.Prefill(producer, api, body, options); });
  }

  DecodeOutcome Decode(const EngineTarget& consumer, const PrefillResult& handoff,
                       const nlohmann::json& body, bool client_streams, const LegOptions& options,
                       DecodeObserver& observer) override {
    return RunBlocking<DecodeOutcome>(executor_, [&] {
      return client_.Decode(consumer, handoff, body, client_streams, options, observer);
    });
  }

  ControlResponse Control(const EngineTarget& engine, std::string_view method,
                          std::string_view path, const std::string& body,
                          double timeout_s) override {
    return RunBlocking<ControlResponse>(executor_, [&] {
      return client_.Control(engine, std::string(method), std::string(path), body, timeout_s);
    });
  }

  AsyncEngineClient& async() { return client_; }
  const Executor& executor() const { return executor_; }

 private:
  AsyncEngineClient& client_;
  Executor executor_;
};

}  // namespace narwhal::engines

#endif  // NARWHAL_ENGINES_SYNC_ENGINE_CLIENT_H_
