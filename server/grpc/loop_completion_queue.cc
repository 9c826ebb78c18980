#include "server/grpc/loop_completion_queue.h"

#include <grpc/support/time.h>

#include <boost/asio/post.hpp>

#include "server/grpc/grpc_async_call.h"

namespace narwhal::server {

LoopCompletionQueue::LoopCompletionQueue(boost::asio::io_context& loop)
    : loop_(loop), timer_(loop) {}

void LoopCompletionQueue::Started(bool done) {
  (done ? waiting_ : busy_).fetch_add(1);
  PostPoll();
}

void LoopCompletionQueue::PostPoll() {
  if (shut_.load() || poll_posted_.exchange(true)) return;
  // Weak: the service owns its queues; a loop outliving them drops the poll.
  boost::asio::post(loop_, [weak = weak_from_this()] {
    if (std::shared_ptr<LoopCompletionQueue> self = weak.lock()) {
      self->poll_posted_.store(false);
      self->Poll(/*drain=*/false);
    }
  });
}

void LoopCompletionQueue::Poll(bool drain) {
  if (shut_.load()) return;
  void* tag = nullptr;
  bool ok = false;
  // A poll that finds the queue empty costs gRPC a turn at its poller (an
  // epoll_wait, maybe a wake-up of another thread), so the poll that follows
  // an operation takes one completion — usually that operation's, finished
  // inside the call that started it — and leaves the rest to the timer's.
  do {
    const grpc::CompletionQueue::NextStatus status =
        cq_.AsyncNext(&tag, &ok, gpr_inf_past(GPR_CLOCK_MONOTONIC));
    if (status != grpc::CompletionQueue::GOT_EVENT) break;
    (GrpcAsyncCall::OpOf(tag) == GrpcAsyncCall::Op::kDone ? waiting_ : busy_).fetch_sub(1);
    GrpcAsyncCall::Complete(tag, ok);
  } while (drain);
  Arm();
}

void LoopCompletionQueue::Arm() {
  if (shut_.load()) return;
  std::chrono::milliseconds every;
  if (busy_.load() > 0) {
    every = kFastPoll;
  } else if (waiting_.load() > 0) {
    every = kSlowPoll;
  } else {
    return;  // nothing in flight: the next Started() polls
  }
  const auto at = std::chrono::steady_clock::now() + every;
  if (timer_armed_ && timer_at_ <= at) return;
  timer_armed_ = true;
  timer_at_ = at;
  timer_.expires_at(at);
  timer_.async_wait([weak = weak_from_this()](const boost::system::error_code& error) {
    if (error) return;  // re-armed sooner, or the loop stopped
    if (std::shared_ptr<LoopCompletionQueue> self = weak.lock()) {
      self->timer_armed_ = false;
      self->Poll(/*drain=*/true);
    }
  });
}

void LoopCompletionQueue::Shutdown() {
  if (shut_.exchange(true)) return;
  cq_.Shutdown();
  void* tag = nullptr;
  bool ok = false;
  while (cq_.Next(&tag, &ok)) GrpcAsyncCall::Complete(tag, ok);
}

}  // namespace narwhal::server
