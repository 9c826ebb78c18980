#include "router/fleet/spawned_tasks.h"

#include <boost/asio/co_spawn.hpp>
#include <exception>
#include <stdexcept>

#include "router/common/log.h"

namespace narwhal::router {

void SpawnedTasks::Spawn(engines::Awaitable<void> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++running_;
  }
  boost::asio::co_spawn(executor_, std::move(task), [this](std::exception_ptr e) {
    if (e) {
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& ex) {
        LogError(what_ + ": a task ended with an exception: " + ex.what());
      } catch (...) {
        LogError(what_ + ": a task ended with an unknown exception");
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (--running_ == 0) cv_.notify_all();
  });
}

void SpawnedTasks::Wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return running_ == 0; });
}

size_t SpawnedTasks::running() const {
  std::lock_guard<std::mutex> lock(mu_);
  return running_;
}

}  // namespace narwhal::router
