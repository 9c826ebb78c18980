// ControlLoop: an event loop on a thread of its own for control-plane tests.
// The coroutines of the fleet monitor, the start-up checks and the prober
// run on it, as they run on the router's first loop; Run() waits for one
// from the test's thread.
#ifndef NARWHAL_TESTS_FAKES_CONTROL_LOOP_H_
#define NARWHAL_TESTS_FAKES_CONTROL_LOOP_H_

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <optional>
#include <thread>
#include <utility>

#include "engines/run_blocking.h"

namespace narwhal::testing {

class ControlLoop {
 public:
  ControlLoop() : thread_([this] { context_.run(); }) {}
  ~ControlLoop() {
    work_.reset();
    context_.stop();  // timers still pending on a fake clock end with it
    thread_.join();
  }
  ControlLoop(const ControlLoop&) = delete;
  ControlLoop& operator=(const ControlLoop&) = delete;

  engines::Executor executor() { return context_.get_executor(); }

  template <typename T>
  T Run(engines::Awaitable<T> awaitable) {
    return engines::RunBlocking(executor(), std::move(awaitable));
  }
  void Run(engines::Awaitable<void> awaitable) {
    engines::RunBlocking(executor(), std::move(awaitable));
  }
  // Waits until every handler posted before this call has run.
  void Drain() {
    Run([]() -> engines::Awaitable<void> { co_return; }());
  }

 private:
  boost::asio::io_context context_;
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work_{
      context_.get_executor()};
  std::thread thread_;
};

}  // namespace narwhal::testing

#endif  // NARWHAL_TESTS_FAKES_CONTROL_LOOP_H_
