// IdleMemoryRelease: the heap goes back to the system once per idle period
// after traffic, never while a request is in flight.
#include "server/idle_memory_release.h"

#include <atomic>
#include <chrono>
#include <thread>

#include <gtest/gtest.h>

namespace narwhal::server {
namespace {

TEST(IdleReleasePolicyTest, NothingBeforeAnyTraffic) {
  IdleReleasePolicy policy(3);
  for (int i = 0; i < 10; ++i) EXPECT_FALSE(policy.Observe(0)) << i;
}

TEST(IdleReleasePolicyTest, OnceAfterTrafficThenIdleForTheWholeRun) {
  IdleReleasePolicy policy(3);
  EXPECT_FALSE(policy.Observe(5));
  EXPECT_FALSE(policy.Observe(0));
  EXPECT_FALSE(policy.Observe(0));
  EXPECT_TRUE(policy.Observe(0));
  // The same idle period never releases again.
  for (int i = 0; i < 10; ++i) EXPECT_FALSE(policy.Observe(0)) << i;
}

TEST(IdleReleasePolicyTest, TrafficRestartsTheIdleRun) {
  IdleReleasePolicy policy(3);
  EXPECT_FALSE(policy.Observe(1));
  EXPECT_FALSE(policy.Observe(0));
  EXPECT_FALSE(policy.Observe(0));
  EXPECT_FALSE(policy.Observe(2));  // busy again before the run completed
  EXPECT_FALSE(policy.Observe(0));
  EXPECT_FALSE(policy.Observe(0));
  EXPECT_TRUE(policy.Observe(0));
  EXPECT_FALSE(policy.Observe(4));
  EXPECT_FALSE(policy.Observe(0));
  EXPECT_FALSE(policy.Observe(0));
  EXPECT_TRUE(policy.Observe(0));  // a second load, a second release
}

// Waits (bounded) until `done()`.
template <typename Done>
bool WaitFor(Done done) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

TEST(IdleMemoryReleaseTest, ReleasesOnItsThreadAfterTheLoadEnds) {
  std::atomic<int> inflight{3};
  std::atomic<int> samples{0};
  std::atomic<int> releases{0};
  std::atomic<int> inflight_at_release{-1};
  IdleMemoryRelease release(
      [&] {
        ++samples;
        return inflight.load();
      },
      std::chrono::milliseconds(1), 2,
      [&] {
        inflight_at_release = inflight.load();
        ++releases;
      });
  ASSERT_TRUE(WaitFor([&] { return samples.load() >= 5; }));
  EXPECT_EQ(releases.load(), 0);  // busy all along
  inflight = 0;
  ASSERT_TRUE(WaitFor([&] { return releases.load() == 1; }));
  EXPECT_EQ(inflight_at_release.load(), 0);
  const int seen = samples.load();
  ASSERT_TRUE(WaitFor([&] { return samples.load() >= seen + 10; }));
  EXPECT_EQ(releases.load(), 1);  // one per idle period
}

}  // namespace
}  // namespace narwhal::server
