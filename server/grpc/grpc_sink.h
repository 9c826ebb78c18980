// GrpcSink: the router's ResponseSink for a gRPC call (server/grpc/inference_calls).
//
// The router writes on the request's event loop, and the call reads on the
// same loop (the gRPC door's completion queues are driven by the loops).
// Between them sits a bounded queue of relayed chunks: Event() queues one,
// Flush() wakes the call and completes while the queue has room — when it
// is full the request's coroutine waits (without blocking its loop) until the
// call takes a chunk, so a slow gRPC reader pauses the engine read (B13)
// instead of growing memory. Drain() waits until the call took everything.
// The call pops with TryNext() and is woken by the ready callback; it never
// blocks either. Cancel() — the client went away — fails further waits and
// fires the request's cancel token (B19).
//
// Thread-safe for one producer (the router) and one consumer (the call),
// whichever threads they run on.
#ifndef NARWHAL_SERVER_GRPC_GRPC_SINK_H_
#define NARWHAL_SERVER_GRPC_GRPC_SINK_H_

#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "engines/clock.h"
#include "router/outcome.h"
#include "router/response_sink.h"

namespace narwhal::server {

// One relayed decode event, as the gRPC door renders it (a Delta).
struct GrpcChunk {
  int tokens = 0;
  std::string text;           // choice 0's generated text
  std::string finish_reason;  // choice 0's finish_reason, if any
  // The chunk's bytes when they may carry tool calls, reasoning text or
  // logprobs (server/grpc/grpc_typed_fields.h), else empty.
  std::string typed;
};

class GrpcSink : public router::ResponseSink {
 public:
  static constexpr size_t kDefaultCapacity = 64;
  explicit GrpcSink(const engines::Clock& clock, size_t capacity = kDefaultCapacity);

  // --- producer (the router, on its loop) ---
  void Event(std::string_view data, const engines::StreamEvent& event) override;
  engines::Awaitable<bool> Flush(engines::MonoTime deadline) override;
  engines::Awaitable<bool> Drain(engines::MonoTime deadline) override;
  void Finish(router::Outcome outcome) override;

  // --- consumer (the call) ---
  enum class Pop { kChunk, kEnd, kEmpty };
  // Non-blocking. On kEmpty the ready callback fires at the next chunk or end.
  Pop TryNext(GrpcChunk* chunk);
  // Set once, before the router writes.
  void SetReadyCallback(std::function<void()> callback);
  // The outcome; valid once TryNext returned kEnd.
  const router::Outcome& outcome() const { return outcome_; }
  // The client went away. Idempotent; any thread.
  void Cancel();

 private:
  // Waits on the producer's loop until `ready()` (checked under mu_) or
  // `deadline`; false on timeout or cancellation.
  template <typename Ready>
  engines::Awaitable<bool> WaitUntil(Ready ready, engines::MonoTime deadline);
  void WakeConsumer(std::unique_lock<std::mutex>& lock);
  void WakeProducerLocked();

  const engines::Clock& clock_;
  const size_t capacity_;
  std::mutex mu_;
  std::deque<GrpcChunk> queue_;
  bool finished_ = false;
  bool closed_ = false;            // the client went away
  bool consumer_waiting_ = false;  // saw kEmpty and wants the callback
  std::function<void()> ready_;
  router::Outcome outcome_;
  // The producer's pending wait, woken from the consumer's thread.
  std::optional<engines::Executor> producer_executor_;
  std::shared_ptr<engines::Timer> producer_timer_;
};

}  // namespace narwhal::server

#endif  // NARWHAL_SERVER_GRPC_GRPC_SINK_H_
