// LoopCompletionQueue: a gRPC completion queue that one event loop drives.
//
// No thread blocks on the queue. The gRPC door starts the operations of its
// calls (writes, the finish) on the loop that runs the call's request, and
// gRPC usually completes them inside that very call (the bytes went to the
// socket at once); the loop then picks the completion up in a poll it posted
// to itself, so a relayed message costs no thread handoff. What completes
// later — a write waiting for the client's flow-control window, the done
// notification when the client cancels — is picked up by a timer on the
// loop: every kFastPoll while an operation other than a done notification is
// in flight, every kSlowPoll while only calls waiting for their done
// notification are, never while the loop has no call.
//
// Operations are counted with Started(); every completion found is handed to
// GrpcAsyncCall::Complete on the loop's thread. Shutdown() (after the gRPC
// server shut down, from any thread) shuts the queue and drains it on the
// calling thread.
#ifndef NARWHAL_SERVER_GRPC_LOOP_COMPLETION_QUEUE_H_
#define NARWHAL_SERVER_GRPC_LOOP_COMPLETION_QUEUE_H_

#include <grpcpp/completion_queue.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <memory>

namespace narwhal::server {

class LoopCompletionQueue : public std::enable_shared_from_this<LoopCompletionQueue> {
 public:
  static constexpr std::chrono::milliseconds kFastPoll{1};
  static constexpr std::chrono::milliseconds kSlowPoll{5};

  explicit LoopCompletionQueue(boost::asio::io_context& loop);
  LoopCompletionQueue(const LoopCompletionQueue&) = delete;
  LoopCompletionQueue& operator=(const LoopCompletionQueue&) = delete;

  grpc::CompletionQueue* cq() { return &cq_; }
  boost::asio::io_context& loop() { return loop_; }

  // An operation was started with a tag of GrpcAsyncCall; `done` for a done
  // notification. On the loop's thread (any thread for a done notification):
  // a poll follows on the loop.
  void Started(bool done);

  // Shuts the queue down and handles what is left on the calling thread;
  // the loop stops polling it. Idempotent.
  void Shutdown();

  // Operations in flight (for tests): not done notifications, and those.
  int busy() const { return busy_.load(); }
  int waiting() const { return waiting_.load(); }

 private:
  // Handles one completion ready now (every one when `drain`), then re-arms
  // the timer.
  void Poll(bool drain);
  void Arm();
  void PostPoll();

  boost::asio::io_context& loop_;
  grpc::CompletionQueue cq_;
  boost::asio::steady_timer timer_;
  std::atomic<int> busy_{0};     // writes and finishes in flight
  std::atomic<int> waiting_{0};  // done notifications in flight
  std::atomic<bool> poll_posted_{false};
  std::atomic<bool> shut_{false};
  // The loop's timer: armed and when it fires (loop thread only).
  bool timer_armed_ = false;
  std::chrono::steady_clock::time_point timer_at_;
};

}  // namespace narwhal::server

#endif  // NARWHAL_SERVER_GRPC_LOOP_COMPLETION_QUEUE_H_
