// ResponseChannel: the bounded queue from a request's router worker to its
// front door, plus the request's cancellation token.
//
// The worker pushes relayed decode chunks (streaming clients) and finally one
// Outcome. A full channel blocks the worker, so a slow client back-pressures
// the engine read instead of growing memory. The front door pops with a
// timeout (blocking HTTP threads) or TryPop plus a ready callback (gRPC
// reactors, which must not block). Cancel() — the client went away — wakes a
// blocked worker, fails further pushes and fires the cancel token, which
// aborts in-flight engine legs (B19).
//
// Chunk slots are reused: steady-state streaming does not allocate.
// Thread-safe for one producer and one consumer.
#ifndef NARWHAL_ROUTER_RESPONSE_CHANNEL_H_
#define NARWHAL_ROUTER_RESPONSE_CHANNEL_H_

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "engines/api.h"
#include "engines/cancel_token.h"
#include "router/outcome.h"

namespace narwhal::router {

struct Chunk {
  std::string data;  // the engine event's JSON payload, relayed as-is
  int tokens = 0;
  std::string text;           // choice 0's generated text
  std::string finish_reason;  // choice 0's finish_reason, if any
};

class ResponseChannel {
 public:
  static constexpr size_t kDefaultCapacity = 64;
  explicit ResponseChannel(size_t capacity = kDefaultCapacity);
  ResponseChannel(const ResponseChannel&) = delete;
  ResponseChannel& operator=(const ResponseChannel&) = delete;

  // --- producer (router worker) ---
  // Copies a chunk in; blocks while full, at most until `deadline`. False
  // once the consumer cancelled or the deadline passed while blocked.
  bool Push(std::string_view data, int tokens, std::string_view text,
            std::string_view finish_reason,
            engines::MonoTime deadline = engines::MonoTime::max());
  // Ends the exchange with its outcome. Exactly once.
  void Finish(Outcome outcome);
  // Waits until the consumer has taken every pushed chunk, at most until
  // `deadline`. False if the consumer cancelled or the deadline passed.
  bool WaitDrained(engines::MonoTime deadline);

  // --- consumer (front door) ---
  enum class Pop { kChunk, kEnd, kEmpty };
  // Waits up to `timeout` for the next chunk or the end. On kChunk, `*chunk`
  // receives the data (its old buffers are recycled into the channel).
  Pop Next(Chunk* chunk, std::chrono::milliseconds timeout);
  // Non-blocking. On kEmpty the ready callback fires at the next Push/Finish.
  Pop TryNext(Chunk* chunk);
  void SetReadyCallback(std::function<void()> callback);
  // The outcome; valid once Next/TryNext returned kEnd.
  const Outcome& outcome() const { return outcome_; }

  // The client went away. Idempotent; safe from any thread.
  void Cancel();
  bool cancelled() const { return cancel_.cancelled(); }
  engines::CancelToken& cancel_token() { return cancel_; }

 private:
  Pop TakeLocked(Chunk* chunk);
  void Notify(std::unique_lock<std::mutex>& lock);

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Chunk> slots_;
  size_t head_ = 0;   // next slot to pop
  size_t count_ = 0;  // filled slots
  bool finished_ = false;
  bool closed_ = false;   // consumer cancelled
  bool waiting_ = false;  // consumer saw kEmpty and wants the callback
  std::function<void()> ready_;
  Outcome outcome_;
  engines::CancelToken cancel_;
};

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_RESPONSE_CHANNEL_H_
