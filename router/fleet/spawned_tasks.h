// SpawnedTasks: the coroutines a control-plane part (the fleet monitor, the
// start-up checks) runs on its loop, counted so that the part can stop from
// another thread and wait until none is left. A task that throws is logged
// and counted as ended. Thread-safe.
#ifndef NARWHAL_ROUTER_FLEET_SPAWNED_TASKS_H_
#define NARWHAL_ROUTER_FLEET_SPAWNED_TASKS_H_

#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <string>

#include "engines/clock.h"
#include "engines/engine_client.h"

namespace narwhal::router {

class SpawnedTasks {
 public:
  // `what` names the tasks in the log line of one that throws.
  SpawnedTasks(engines::Executor executor, std::string what)
      : executor_(std::move(executor)), what_(std::move(what)) {}
  SpawnedTasks(const SpawnedTasks&) = delete;
  SpawnedTasks& operator=(const SpawnedTasks&) = delete;
  ~SpawnedTasks() { Wait(); }

  // Runs `task` on the executor.
  void Spawn(engines::Awaitable<void> task);
  // Blocks until every spawned task has ended. Never from the executor's
  // own thread: it would wait for itself.
  void Wait();
  size_t running() const;
  const engines::Executor& executor() const { return executor_; }

 private:
  const engines::Executor executor_;
  const std::string what_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  size_t running_ = 0;
};

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_FLEET_SPAWNED_TASKS_H_
