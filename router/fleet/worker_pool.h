// WorkerPool: router-owned threads that run client requests' engine legs.
//
// Threads are created on demand up to `max_threads` and then kept, so the hot
// path reuses threads instead of creating one per request. Admission caps
// concurrent requests at the same number, so a task never waits for a
// thread. Thread-safe.
#ifndef NARWHAL_ROUTER_FLEET_WORKER_POOL_H_
#define NARWHAL_ROUTER_FLEET_WORKER_POOL_H_

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace narwhal::router {

class WorkerPool {
 public:
  explicit WorkerPool(size_t max_threads) : max_threads_(max_threads) {}
  // Joins every thread after the queued tasks ran.
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  void Run(std::function<void()> task);
  size_t threads() const;

 private:
  void Loop();

  const size_t max_threads_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  std::vector<std::thread> threads_;
  size_t idle_ = 0;
  bool stop_ = false;
};

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_FLEET_WORKER_POOL_H_
