#include "engines/http/io_loops.h"

#include "engines/http/cpu_limit.h"

namespace narwhal::engines {

IoLoops::IoLoops(int threads) {
  if (threads <= 0) threads = ThreadsPerCore();
  for (int i = 0; i < threads; ++i) {
    auto loop = std::make_unique<Loop>();
    loop->work.emplace(loop->context.get_executor());
    loops_.push_back(std::move(loop));
  }
  for (auto& loop : loops_) {
    Loop* l = loop.get();
    l->thread = std::thread([l] { l->context.run(); });
  }
}

IoLoops::~IoLoops() { Stop(); }

Executor IoLoops::Next() {
  const unsigned i = next_.fetch_add(1, std::memory_order_relaxed) % loops_.size();
  return loops_[i]->context.get_executor();
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
