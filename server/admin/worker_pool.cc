#include "server/admin/worker_pool.h"

namespace narwhal::server {

WorkerPool::~WorkerPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void WorkerPool::Run(std::function<void()> task) {
  std::lock_guard<std::mutex> lock(mu_);
  tasks_.push_back(std::move(task));
  if (idle_ >= tasks_.size() || threads_.size() >= max_threads_) {
    cv_.notify_one();
    return;
  }
  threads_.emplace_back([this] { Loop(); });
}

size_t WorkerPool::threads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return threads_.size();
}

void WorkerPool::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    if (tasks_.empty()) {
      if (stop_) return;
      ++idle_;
      cv_.wait(lock, [&] { return stop_ || !tasks_.empty(); });
      --idle_;
      continue;
    }
    std::function<void()> task = std::move(tasks_.front());
    tasks_.pop_front();
    lock.unlock();
    task();
    lock.lock();
  }
}

}  // namespace narwhal::server
