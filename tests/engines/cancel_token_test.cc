// CancelToken: the B19 signal a client request threads through its legs.
#include "engines/cancel_token.h"

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace narwhal::engines {
namespace {

using namespace std::chrono_literals;

TEST(CancelTokenTest, StartsUncancelled) {
  CancelToken token;
  EXPECT_FALSE(token.cancelled());
}

TEST(CancelTokenTest, CancelRunsEachCallbackOnce) {
  CancelToken token;
  int a = 0;
  int b = 0;
  CancelToken::Registration ra(&token, [&] { ++a; });
  CancelToken::Registration rb(&token, [&] { ++b; });
  token.Cancel();
  EXPECT_TRUE(token.cancelled());
  EXPECT_EQ(a, 1);
  EXPECT_EQ(b, 1);
  token.Cancel();
  EXPECT_EQ(a, 1);
  EXPECT_EQ(b, 1);
}

TEST(CancelTokenTest, CallbackRunsOnTheCancellingThread) {
  CancelToken token;
  std::thread::id ran_on;
  CancelToken::Registration r(&token, [&] { ran_on = std::this_thread::get_id(); });
  std::thread canceller([&] { token.Cancel(); });
  const std::thread::id canceller_id = canceller.get_id();
  canceller.join();
  EXPECT_EQ(ran_on, canceller_id);
}

TEST(CancelTokenTest, RegistrationAfterCancelRunsAtOnce) {
  CancelToken token;
  token.Cancel();
  int runs = 0;
  std::thread::id ran_on;
  CancelToken::Registration r(&token, [&] {
    ++runs;
    ran_on = std::this_thread::get_id();
  });
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  token.Cancel();
  EXPECT_EQ(runs, 1);
}

TEST(CancelTokenTest, DestroyedRegistrationNeverRuns) {
  CancelToken token;
  int runs = 0;
  {
    CancelToken::Registration r(&token, [&] { ++runs; });
  }
  int kept = 0;
  CancelToken::Registration other(&token, [&] { ++kept; });
  token.Cancel();
  EXPECT_EQ(runs, 0);
  EXPECT_EQ(kept, 1);
}

TEST(CancelTokenTest, NullTokenRegistrationIsInert) {
  int runs = 0;
  { CancelToken::Registration r(nullptr, [&] { ++runs; }); }
  CancelToken::Registration empty;
  EXPECT_EQ(runs, 0);
}

TEST(CancelTokenTest, CancelFromInsideACallbackDoesNotDeadlock) {
  CancelToken token;
  int runs = 0;
  CancelToken::Registration r(&token, [&] {
    ++runs;
    token.Cancel();  // already cancelled: returns at once
  });
  token.Cancel();
  EXPECT_EQ(runs, 1);
}

// The registration's destructor must not return while its callback is still
// running on the cancelling thread: the callback may use objects the
// registration's owner is about to destroy.
TEST(CancelTokenTest, DestructorWaitsForARunningCallback) {
  CancelToken token;
  std::promise<void> started;
  std::promise<void> release;
  std::shared_future<void> release_f = release.get_future().share();
  std::atomic<bool> callback_done{false};
  auto reg = std::make_unique<CancelToken::Registration>(&token, [&] {
    started.set_value();
    release_f.wait();
    callback_done = true;
  });

  std::thread canceller([&] { token.Cancel(); });
  ASSERT_EQ(started.get_future().wait_for(10s), std::future_status::ready);

  std::atomic<bool> destroyed{false};
  std::atomic<bool> done_seen_by_destroyer{false};
  std::thread destroyer([&] {
    reg.reset();
    done_seen_by_destroyer = callback_done.load();
    destroyed = true;
  });
  std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(destroyed.load()) << "destructor returned while the callback was running";
  release.set_value();
  destroyer.join();
  canceller.join();
  EXPECT_TRUE(done_seen_by_destroyer.load());
}

TEST(CancelTokenTest, ConcurrentRegistrationsAndCancelRunEachCallbackAtMostOnce) {
  constexpr int kThreads = 8;
  constexpr int kPerThread = 200;
  CancelToken token;
  std::vector<std::atomic<int>> runs(kThreads * kPerThread);
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  // Each thread keeps every registration alive until after Cancel, so each
  // callback must run exactly once: either from Cancel or at registration.
  std::promise<void> cancelled;
  std::shared_future<void> cancelled_f = cancelled.get_future().share();
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<std::unique_ptr<CancelToken::Registration>> regs;
      ++ready;
      for (int i = 0; i < kPerThread; ++i) {
        const int idx = t * kPerThread + i;
        regs.push_back(std::make_unique<CancelToken::Registration>(&token, [&runs, idx] {
          runs[idx].fetch_add(1);
        }));
      }
      cancelled_f.wait();
    });
  }
  while (ready.load() < kThreads) std::this_thread::yield();
  token.Cancel();
  cancelled.set_value();
  for (auto& th : threads) th.join();
  for (int i = 0; i < kThreads * kPerThread; ++i) EXPECT_EQ(runs[i].load(), 1) << i;
}

}  // namespace
}  // namespace narwhal::engines
