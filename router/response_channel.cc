#include "router/response_channel.h"

#include <utility>

namespace narwhal::router {

ResponseChannel::ResponseChannel(size_t capacity) : slots_(capacity == 0 ? 1 : capacity) {}

bool ResponseChannel::Push(std::string_view data, int tokens, std::string_view text,
                           std::string_view finish_reason, engines::MonoTime deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  auto ready = [&] { return closed_ || count_ < slots_.size(); };
  if (deadline == engines::MonoTime::max()) {
    cv_.wait(lock, ready);
  } else if (!cv_.wait_until(lock, deadline, ready)) {
    return false;  // the client did not read in time
  }
  if (closed_) return false;
  Chunk& slot = slots_[(head_ + count_) % slots_.size()];
  slot.data.assign(data.data(), data.size());
  slot.tokens = tokens;
  slot.text.assign(text.data(), text.size());
  slot.finish_reason.assign(finish_reason.data(), finish_reason.size());
  ++count_;
  Notify(lock);
  return true;
}

bool ResponseChannel::WaitDrained(engines::MonoTime deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  auto drained = [&] { return closed_ || count_ == 0; };
  if (deadline == engines::MonoTime::max()) {
    cv_.wait(lock, drained);
  } else {
    cv_.wait_until(lock, deadline, drained);
  }
  return !closed_ && count_ == 0;
}

void ResponseChannel::Finish(Outcome outcome) {
  std::unique_lock<std::mutex> lock(mu_);
  outcome_ = std::move(outcome);
  finished_ = true;
  Notify(lock);
}

void ResponseChannel::Notify(std::unique_lock<std::mutex>& lock) {
  cv_.notify_all();
  if (waiting_ && ready_) {
    waiting_ = false;
    std::function<void()> ready = ready_;
    lock.unlock();
    ready();
  }
}

ResponseChannel::Pop ResponseChannel::TakeLocked(Chunk* chunk) {
  if (count_ > 0) {
    Chunk& slot = slots_[head_];
    std::swap(*chunk, slot);  // the consumer's old buffers become the slot's
    head_ = (head_ + 1) % slots_.size();
    --count_;
    cv_.notify_all();  // room for a blocked producer
    return Pop::kChunk;
  }
  if (finished_) return Pop::kEnd;
  return Pop::kEmpty;
}

ResponseChannel::Pop ResponseChannel::Next(Chunk* chunk, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return count_ > 0 || finished_; });
  return TakeLocked(chunk);
}

ResponseChannel::Pop ResponseChannel::TryNext(Chunk* chunk) {
  std::unique_lock<std::mutex> lock(mu_);
  const Pop pop = TakeLocked(chunk);
  if (pop == Pop::kEmpty) waiting_ = true;
  return pop;
}

void ResponseChannel::SetReadyCallback(std::function<void()> callback) {
  std::lock_guard<std::mutex> lock(mu_);
  ready_ = std::move(callback);
}

void ResponseChannel::Cancel() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
  }
  cv_.notify_all();
  cancel_.Cancel();
}

}  // namespace narwhal::router
