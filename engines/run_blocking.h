// RunBlocking: waits, on a thread outside the event loops, for a coroutine
// run on one of them: tools (narwhal-check), operator actions that block
// their own worker thread (preflight, readmission), start-up before serving,
// and tests. Never call it from a loop thread: it would wait for itself.
#ifndef NARWHAL_ENGINES_RUN_BLOCKING_H_
#define NARWHAL_ENGINES_RUN_BLOCKING_H_

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <exception>
#include <future>
#include <utility>

#include "engines/engine_client.h"

namespace narwhal::engines {

// Runs `awaitable` on `executor` and returns its result (rethrows what it
// threw).
template <typename T>
T RunBlocking(const Executor& executor, Awaitable<T> awaitable) {
  std::promise<T> promise;
  std::future<T> future = promise.get_future();
  boost::asio::co_spawn(executor, std::move(awaitable), [&promise](std::exception_ptr e, T value) {
    if (e) {
      promise.set_exception(e);
    } else {
      promise.set_value(std::move(value));
    }
  });
  return future.get();
}

inline void RunBlocking(const Executor& executor, Awaitable<void> awaitable) {
  std::promise<void> promise;
  std::future<void> future = promise.get_future();
  boost::asio::co_spawn(executor, std::move(awaitable), [&promise](std::exception_ptr e) {
    if (e) {
      promise.set_exception(e);
    } else {
      promise.set_value();
    }
  });
  future.get();
}

}  // namespace narwhal::engines

#endif  // NARWHAL_ENGINES_RUN_BLOCKING_H_
