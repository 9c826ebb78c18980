#include "server/grpc/grpc_sink.h"

#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <utility>

#include "server/grpc/grpc_typed_fields.h"

namespace narwhal::server {

GrpcSink::GrpcSink(const engines::Clock& clock, size_t capacity)
    : clock_(clock), capacity_(capacity == 0 ? 1 : capacity) {}

void GrpcSink::Event(std::string_view data, const engines::StreamEvent& event) {
  std::string typed = MayCarryTypedFields(data) ? std::string(data) : std::string();
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return;
  queue_.push_back(GrpcChunk{event.tokens, event.text, event.finish_reason, std::move(typed)});
}

void GrpcSink::WakeConsumer(std::unique_lock<std::mutex>& lock) {
  if (consumer_waiting_ && ready_) {
    consumer_waiting_ = false;
    // ready_ is set once, before the producer starts: called without a copy.
    lock.unlock();
    ready_();
    lock.lock();
  }
}

void GrpcSink::WakeProducerLocked() {
  if (producer_timer_ && producer_executor_) {
    std::weak_ptr<engines::Timer> weak = producer_timer_;
    boost::asio::post(*producer_executor_, [weak] {
      if (std::shared_ptr<engines::Timer> t = weak.lock()) t->Cancel();
    });
  }
}

template <typename Ready>
engines::Awaitable<bool> GrpcSink::WaitUntil(Ready ready, engines::MonoTime deadline) {
  const engines::Executor executor = co_await boost::asio::this_coro::executor;
  std::shared_ptr<engines::Timer> timer = clock_.NewTimer(executor);
  while (true) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (closed_) co_return false;
      if (ready()) {
        producer_timer_.reset();
        co_return true;
      }
      if (clock_.Now() >= deadline) {
        producer_timer_.reset();
        co_return false;
      }
      // The consumer wakes this wait by cancelling the timer on this loop;
      // the cancel is posted, so it cannot run before the wait starts.
      producer_executor_ = executor;
      producer_timer_ = timer;
    }
    co_await engines::AsyncWaitUntil(*timer, deadline, boost::asio::use_awaitable);
  }
}

engines::Awaitable<bool> GrpcSink::Flush(engines::MonoTime deadline) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (closed_) co_return false;
    WakeConsumer(lock);
    // The usual case — the reader keeps up — needs no timer.
    if (queue_.size() < capacity_) co_return true;
  }
  const bool room = co_await WaitUntil([this] { return queue_.size() < capacity_; }, deadline);
  co_return room;
}

engines::Awaitable<bool> GrpcSink::Drain(engines::MonoTime deadline) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    WakeConsumer(lock);
    if (queue_.empty() && !closed_) co_return true;
  }
  const bool empty = co_await WaitUntil([this] { return queue_.empty(); }, deadline);
  co_return empty;
}

void GrpcSink::Finish(router::Outcome outcome) {
  std::unique_lock<std::mutex> lock(mu_);
  outcome_ = std::move(outcome);
  finished_ = true;
  WakeConsumer(lock);
}

GrpcSink::Pop GrpcSink::TryNext(GrpcChunk* chunk) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!queue_.empty()) {
    *chunk = std::move(queue_.front());
    queue_.pop_front();
    WakeProducerLocked();  // room for a waiting producer
    return Pop::kChunk;
  }
  if (finished_) return Pop::kEnd;
  consumer_waiting_ = true;
  return Pop::kEmpty;
}

void GrpcSink::SetReadyCallback(std::function<void()> callback) {
  std::lock_guard<std::mutex> lock(mu_);
  ready_ = std::move(callback);
}

void GrpcSink::Cancel() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    WakeProducerLocked();
  }
  cancel_token().Cancel();
}

}  // namespace narwhal::server
