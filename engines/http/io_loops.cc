#include "engines/http/io_loops.h"

#include <pthread.h>
#include <time.h>

#include <chrono>

#include "engines/http/cpu_limit.h"

namespace narwhal::engines {

namespace {

int LoopCount(int threads) { return threads <= 0 ? ThreadsPerCore() : threads; }

}  // namespace

IoLoops::IoLoops(int threads, LoopPlacementOptions placement)
    : placement_(LoopCount(threads), placement) {
  threads = LoopCount(threads);
  for (int i = 0; i < threads; ++i) {
    auto loop = std::make_unique<Loop>();
    loop->work.emplace(loop->context.get_executor());
    loops_.push_back(std::move(loop));
  }
  for (auto& loop : loops_) {
    Loop* l = loop.get();
    l->thread = std::thread([l] { l->context.run(); });
    l->has_cpu_clock = pthread_getcpuclockid(l->thread.native_handle(), &l->cpu_clock) == 0;
  }
}

IoLoops::~IoLoops() { Stop(); }

Executor IoLoops::Next() {
  const unsigned i = next_.fetch_add(1, std::memory_order_relaxed) % loops_.size();
  return loops_[i]->context.get_executor();
}

Executor IoLoops::Place() {
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now().time_since_epoch())
                          .count();
  std::lock_guard<std::mutex> lock(placement_mu_);
  const int i = placement_.Pick(now, [this](int i) -> int64_t {
    const Loop& loop = *loops_[static_cast<size_t>(i)];
    timespec ts{};
    // A clock that cannot be read counts as an idle loop.
    if (!loop.has_cpu_clock || clock_gettime(loop.cpu_clock, &ts) != 0) return 0;
    return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
  });
  return loops_[static_cast<size_t>(i)]->context.get_executor();
}

bool IoLoops::OnLoopThread() const {
  for (const auto& loop : loops_) {
    if (loop->context.get_executor().running_in_this_thread()) return true;
  }
  return false;
}

void IoLoops::Stop() {
  for (auto& loop : loops_) {
    loop->work.reset();
    loop->context.stop();
  }
  for (auto& loop : loops_) {
    if (loop->thread.joinable()) loop->thread.join();
  }
}

}  // namespace narwhal::engines
