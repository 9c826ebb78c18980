// WorkerPool (server/admin/worker_pool.h): the admin service's threads for
// operator actions that wait.
#include "server/admin/worker_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>

namespace narwhal::server {
namespace {

using namespace std::chrono_literals;

// Fulfils a promise when the last copy of the task holding it is destroyed.
// The deleter owns the promise, so it outlives the signalling thread's use.
std::shared_ptr<int> DestructionSignal(std::shared_ptr<std::promise<void>> p) {
  return std::shared_ptr<int>(new int(0), [p](int* x) {
    delete x;
    p->set_value();
  });
}

TEST(WorkerPoolTest, SequentialTasksReuseOneThread) {
  WorkerPool pool(8);
  int ran = 0;
  for (int i = 0; i < 100; ++i) {
    auto done = std::make_shared<std::promise<void>>();
    std::future<void> f = done->get_future();
    // The pool destroys a finished task under its lock right before the
    // worker goes idle, so once the signal fires the next Run() finds it idle.
    pool.Run([&ran, signal = DestructionSignal(done)] { ++ran; });
    ASSERT_EQ(f.wait_for(10s), std::future_status::ready) << i;
  }
  EXPECT_EQ(ran, 100);
  EXPECT_EQ(pool.threads(), 1u);
}

TEST(WorkerPoolTest, ConcurrentTasksGetTheirOwnThreads) {
  std::promise<void> a_started, b_started;
  std::shared_future<void> a = a_started.get_future().share();
  std::shared_future<void> b = b_started.get_future().share();
  std::promise<bool> a_saw_b, b_saw_a;
  auto fa = a_saw_b.get_future();
  auto fb = b_saw_a.get_future();
  WorkerPool pool(4);  // destroyed (joined) before the promises its tasks use
  pool.Run([&] {
    a_started.set_value();
    a_saw_b.set_value(b.wait_for(10s) == std::future_status::ready);
  });
  pool.Run([&] {
    b_started.set_value();
    b_saw_a.set_value(a.wait_for(10s) == std::future_status::ready);
  });
  EXPECT_TRUE(fa.get());
  EXPECT_TRUE(fb.get());
  EXPECT_EQ(pool.threads(), 2u);
}

TEST(WorkerPoolTest, ThreadCountIsCappedAndQueuedTasksStillRun) {
  std::atomic<int> ran{0};
  {
    WorkerPool pool(1);
    std::promise<void> release;
    std::shared_future<void> gate = release.get_future().share();
    pool.Run([gate, &ran] {
      gate.wait_for(10s);
      ++ran;
    });
    for (int i = 0; i < 5; ++i) pool.Run([&ran] { ++ran; });
    EXPECT_EQ(pool.threads(), 1u);
    release.set_value();
  }  // the destructor runs what is queued, then joins
  EXPECT_EQ(ran.load(), 6);
}

}  // namespace
}  // namespace narwhal::server
