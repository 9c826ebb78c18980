// LoopCompletionQueue (server/grpc/loop_completion_queue.h): completions are
// handled on the loop that drives the queue — the one right after an
// operation by the poll it posts, a later one by the loop's timer — and
// whatever is left at shutdown on the thread that shuts it down.
#include "server/grpc/loop_completion_queue.h"

#include <grpc/support/time.h>
#include <grpcpp/alarm.h>
#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "server/grpc/grpc_async_call.h"

namespace narwhal::server {
namespace {

using namespace std::chrono_literals;
using Op = GrpcAsyncCall::Op;

// A call whose operations are alarms; it records where each completed.
class AlarmCall : public GrpcAsyncCall {
 public:
  void* Tag(Op op) { return Hold(op); }

  struct Reaction {
    Op op;
    bool ok;
    std::thread::id thread;
  };
  std::vector<Reaction> reactions;  // read after the loop has stopped
  std::atomic<int> count{0};

 private:
  void React(Op op, bool ok) override {
    reactions.push_back({op, ok, std::this_thread::get_id()});
    count.fetch_add(1);
  }
};

gpr_timespec In(std::chrono::milliseconds ms) {
  return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(ms.count(), GPR_TIMESPAN));
}

class LoopCompletionQueueTest : public ::testing::Test {
 protected:
  // Runs the loop until `call` reacted `n` times (or 10 s passed).
  void RunUntil(const AlarmCall& call, int n) {
    const auto give_up = std::chrono::steady_clock::now() + 10s;
    while (call.count.load() < n && std::chrono::steady_clock::now() < give_up) {
      loop_.run_for(5ms);
      loop_.restart();
    }
  }

  boost::asio::io_context loop_{1};
  std::shared_ptr<LoopCompletionQueue> queue_ = std::make_shared<LoopCompletionQueue>(loop_);
};

TEST_F(LoopCompletionQueueTest, ACompletionReadyAtOnceIsHandledOnTheLoopThatStartedIt) {
  auto call = std::make_shared<AlarmCall>();
  grpc::Alarm alarm;
  alarm.Set(queue_->cq(), gpr_inf_past(GPR_CLOCK_MONOTONIC), call->Tag(Op::kWrite));
  queue_->Started(/*done=*/false);
  EXPECT_EQ(queue_->busy(), 1);
  std::thread::id loop_thread;
  std::thread runner([&] {
    loop_thread = std::this_thread::get_id();
    RunUntil(*call, 1);
  });
  runner.join();
  ASSERT_EQ(call->reactions.size(), 1u);
  EXPECT_EQ(call->reactions[0].op, Op::kWrite);
  EXPECT_TRUE(call->reactions[0].ok);
  EXPECT_EQ(call->reactions[0].thread, loop_thread);
  EXPECT_EQ(queue_->busy(), 0);
  // The tag's hold on the call is gone once it completed.
  EXPECT_EQ(call.use_count(), 1);
  queue_->Shutdown();
}

TEST_F(LoopCompletionQueueTest, ALaterCompletionIsPickedUpByTheLoopsTimer) {
  auto call = std::make_shared<AlarmCall>();
  grpc::Alarm alarm;
  // Not ready at the poll that follows the start: only a timer finds it.
  alarm.Set(queue_->cq(), In(50ms), call->Tag(Op::kWrite));
  queue_->Started(/*done=*/false);
  RunUntil(*call, 1);
  ASSERT_EQ(call->reactions.size(), 1u);
  EXPECT_TRUE(call->reactions[0].ok);
  EXPECT_EQ(queue_->busy(), 0);
  queue_->Shutdown();
}

TEST_F(LoopCompletionQueueTest, ADoneNotificationIsPickedUpWhileOnlyItIsInFlight) {
  auto call = std::make_shared<AlarmCall>();
  grpc::Alarm alarm;
  alarm.Set(queue_->cq(), In(30ms), call->Tag(Op::kDone));
  queue_->Started(/*done=*/true);
  EXPECT_EQ(queue_->waiting(), 1);
  EXPECT_EQ(queue_->busy(), 0);
  RunUntil(*call, 1);
  ASSERT_EQ(call->reactions.size(), 1u);
  EXPECT_EQ(call->reactions[0].op, Op::kDone);
  EXPECT_EQ(queue_->waiting(), 0);
  queue_->Shutdown();
}

TEST_F(LoopCompletionQueueTest, SeveralCompletionsAreAllHandled) {
  std::vector<std::shared_ptr<AlarmCall>> calls;
  std::vector<std::unique_ptr<grpc::Alarm>> alarms;
  for (int i = 0; i < 20; ++i) {
    calls.push_back(std::make_shared<AlarmCall>());
    alarms.push_back(std::make_unique<grpc::Alarm>());
    alarms.back()->Set(queue_->cq(), In(std::chrono::milliseconds(i % 4)),
                       calls.back()->Tag(Op::kWrite));
    queue_->Started(/*done=*/false);
  }
  for (const auto& call : calls) RunUntil(*call, 1);
  for (const auto& call : calls) EXPECT_EQ(call->reactions.size(), 1u);
  EXPECT_EQ(queue_->busy(), 0);
  queue_->Shutdown();
}

TEST_F(LoopCompletionQueueTest, ShutdownHandlesWhatIsLeftOnTheCallingThread) {
  auto call = std::make_shared<AlarmCall>();
  grpc::Alarm alarm;
  alarm.Set(queue_->cq(), In(1h), call->Tag(Op::kWrite));
  queue_->Started(/*done=*/false);
  alarm.Cancel();  // completes, not ok; nobody runs the loop
  queue_->Shutdown();
  ASSERT_EQ(call->reactions.size(), 1u);
  EXPECT_FALSE(call->reactions[0].ok);
  EXPECT_EQ(call->reactions[0].thread, std::this_thread::get_id());
  EXPECT_EQ(call.use_count(), 1);
  // Idempotent, and the loop no longer polls the queue.
  queue_->Shutdown();
  loop_.run_for(20ms);
}

}  // namespace
}  // namespace narwhal::server
