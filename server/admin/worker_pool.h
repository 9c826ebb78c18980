// WorkerPool: the admin service's threads for operator actions that wait
// (preflight, readmission validation: their engine legs run on the owner's
// loop while a worker waits), so no gRPC callback thread ever blocks.
//
// Threads are created on demand up to `max_threads` and then kept; tasks
// beyond that queue in order. The destructor runs what is queued, then
// joins. Thread-safe.
#ifndef NARWHAL_SERVER_ADMIN_WORKER_POOL_H_
#define NARWHAL_SERVER_ADMIN_WORKER_POOL_H_

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace narwhal::server {

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

}  // namespace narwhal::server

#endif  // NARWHAL_SERVER_ADMIN_WORKER_POOL_H_
