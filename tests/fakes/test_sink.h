// TestSink: a router::ResponseSink that records what the router wrote, for
// tests that drive the router core directly. Thread-safe: the router writes
// on a loop thread while the test reads from its own.
#ifndef NARWHAL_TESTS_FAKES_TEST_SINK_H_
#define NARWHAL_TESTS_FAKES_TEST_SINK_H_

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <utility>

#include "router/response_sink.h"

namespace narwhal::testing {

// One relayed event as the client would see it.
struct Chunk {
  std::string data;  // the engine's payload, as relayed
  int tokens = 0;
  std::string text;           // choice 0's generated text
  std::string finish_reason;  // choice 0's finish_reason, if any
};

class TestSink : public router::ResponseSink {
 public:
  enum class Pop { kChunk, kEnd, kEmpty };

  void Event(std::string_view data, const engines::StreamEvent& event) override {
    Notify([&] {
      pending_.push_back(Chunk{std::string(data), event.tokens, event.text, event.finish_reason});
    });
  }

  engines::Awaitable<bool> Flush(engines::MonoTime) override {
    Notify([&] {
      ++flushes_;
      for (Chunk& c : pending_) delivered_.push_back(std::move(c));
      pending_.clear();
    });
    co_return !cancelled();
  }

  engines::Awaitable<bool> Drain(engines::MonoTime) override { co_return !cancelled(); }

  void Finish(router::Outcome outcome) override {
    Notify([&] {
      outcome_ = std::move(outcome);
      finished_ = true;
    });
  }

  // The client went away (B19).
  void Cancel() { cancel_token().Cancel(); }

  // The next delivered chunk or the end, without waiting.
  Pop TryNext(Chunk* chunk) {
    std::lock_guard<std::mutex> lock(mu_);
    return TakeLocked(chunk);
  }
  // Waits up to `timeout` for the next delivered chunk or the end.
  Pop Next(Chunk* chunk, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return !delivered_.empty() || finished_; });
    return TakeLocked(chunk);
  }
  // Called (on the router's loop) after every write to the sink.
  void SetReadyCallback(std::function<void()> callback) {
    std::lock_guard<std::mutex> lock(mu_);
    ready_ = std::move(callback);
  }
  const router::Outcome& outcome() const { return outcome_; }
  int flushes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return flushes_;
  }

 private:
  template <typename Fn>
  void Notify(Fn fn) {
    std::function<void()> ready;
    {
      std::lock_guard<std::mutex> lock(mu_);
      fn();
      ready = ready_;
    }
    cv_.notify_all();
    if (ready) ready();
  }

  Pop TakeLocked(Chunk* chunk) {
    if (!delivered_.empty()) {
      *chunk = std::move(delivered_.front());
      delivered_.pop_front();
      return Pop::kChunk;
    }
    return finished_ ? Pop::kEnd : Pop::kEmpty;
  }

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Chunk> pending_;    // written, not yet flushed
  std::deque<Chunk> delivered_;  // flushed: visible to the client
  bool finished_ = false;
  int flushes_ = 0;
  router::Outcome outcome_;
  std::function<void()> ready_;
};

}  // namespace narwhal::testing

#endif  // NARWHAL_TESTS_FAKES_TEST_SINK_H_
