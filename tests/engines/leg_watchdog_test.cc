// LegWatchdog: the timers that bound engine legs (B12, B13). Bounds are
// generous: a loaded machine may fire late, never early.
#include "engines/leg_watchdog.h"

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace narwhal::engines {
namespace {

using namespace std::chrono_literals;

constexpr auto kGenerous = 10s;

// A timer that records when it fired.
struct Probe {
  std::promise<MonoTime> fired_at;
  std::future<MonoTime> future = fired_at.get_future();
  std::atomic<int> runs{0};
  std::function<void()> Callback() {
    return [this] {
      if (runs.fetch_add(1) == 0) fired_at.set_value(MonoClock::now());
    };
  }
};

TEST(LegWatchdogTest, FiresAfterItsDeadline) {
  LegWatchdog watchdog;
  Probe probe;
  auto timer = watchdog.NewTimer(probe.Callback());
  EXPECT_FALSE(timer->fired());
  const MonoTime deadline = MonoClock::now() + 50ms;
  timer->ArmAt(deadline);
  ASSERT_EQ(probe.future.wait_for(kGenerous), std::future_status::ready);
  EXPECT_GE(probe.future.get(), deadline);
  EXPECT_TRUE(timer->fired());
  EXPECT_EQ(probe.runs.load(), 1);
}

TEST(LegWatchdogTest, UnarmedTimerNeverFires) {
  LegWatchdog watchdog;
  Probe probe;
  auto timer = watchdog.NewTimer(probe.Callback());
  EXPECT_EQ(probe.future.wait_for(200ms), std::future_status::timeout);
  EXPECT_FALSE(timer->fired());
}

TEST(LegWatchdogTest, ReArmingLaterPostponesTheFiring) {
  LegWatchdog watchdog;
  Probe probe;
  auto timer = watchdog.NewTimer(probe.Callback());
  timer->ArmAt(MonoClock::now() + 50ms);
  const MonoTime later = MonoClock::now() + 400ms;
  timer->ArmAt(later);
  ASSERT_EQ(probe.future.wait_for(kGenerous), std::future_status::ready);
  EXPECT_GE(probe.future.get(), later);
}

TEST(LegWatchdogTest, RepeatedReArmingKeepsPostponing) {
  // The B13 pattern: every chunk pushes the deadline out again.
  LegWatchdog watchdog;
  Probe probe;
  auto timer = watchdog.NewTimer(probe.Callback());
  MonoTime last;
  for (int i = 0; i < 10; ++i) {
    last = MonoClock::now() + 100ms;
    timer->ArmAt(last);
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_EQ(probe.future.wait_for(kGenerous), std::future_status::ready);
  EXPECT_GE(probe.future.get(), last);
  EXPECT_EQ(probe.runs.load(), 1);
}

TEST(LegWatchdogTest, ReArmingEarlierFiresEarlier) {
  LegWatchdog watchdog;
  Probe probe;
  auto timer = watchdog.NewTimer(probe.Callback());
  const MonoTime armed = MonoClock::now();
  timer->ArmAt(armed + 60s);
  timer->ArmAt(armed + 50ms);
  ASSERT_EQ(probe.future.wait_for(kGenerous), std::future_status::ready);
  EXPECT_GE(probe.future.get(), armed + 50ms);
}

TEST(LegWatchdogTest, DisarmPreventsFiring) {
  LegWatchdog watchdog;
  Probe probe;
  auto timer = watchdog.NewTimer(probe.Callback());
  timer->ArmAt(MonoClock::now() + 30ms);
  timer->Disarm();
  EXPECT_EQ(probe.future.wait_for(300ms), std::future_status::timeout);
  EXPECT_FALSE(timer->fired());
  EXPECT_EQ(probe.runs.load(), 0);
}

TEST(LegWatchdogTest, ArmingToMaxIsADisarm) {
  // The adapter pauses the read timer this way while its observer blocks.
  LegWatchdog watchdog;
  Probe probe;
  auto timer = watchdog.NewTimer(probe.Callback());
  timer->ArmAt(MonoClock::now() + 30ms);
  timer->ArmAt(MonoTime::max());
  EXPECT_EQ(probe.future.wait_for(300ms), std::future_status::timeout);
  const MonoTime rearmed = MonoClock::now() + 30ms;
  timer->ArmAt(rearmed);
  ASSERT_EQ(probe.future.wait_for(kGenerous), std::future_status::ready);
  EXPECT_GE(probe.future.get(), rearmed);
}

TEST(LegWatchdogTest, ArmAfterDisarmFires) {
  LegWatchdog watchdog;
  Probe probe;
  auto timer = watchdog.NewTimer(probe.Callback());
  timer->ArmAt(MonoClock::now() + 20ms);
  timer->Disarm();
  const MonoTime deadline = MonoClock::now() + 50ms;
  timer->ArmAt(deadline);
  ASSERT_EQ(probe.future.wait_for(kGenerous), std::future_status::ready);
  EXPECT_GE(probe.future.get(), deadline);
}

TEST(LegWatchdogTest, FiresOnlyOnceAndArmingAfterwardsHasNoEffect) {
  LegWatchdog watchdog;
  Probe probe;
  auto timer = watchdog.NewTimer(probe.Callback());
  timer->ArmAt(MonoClock::now());
  ASSERT_EQ(probe.future.wait_for(kGenerous), std::future_status::ready);
  timer->ArmAt(MonoClock::now() + 10ms);
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(probe.runs.load(), 1);
  EXPECT_TRUE(timer->fired());
}

TEST(LegWatchdogTest, DisarmWaitsForARunningCallback) {
  LegWatchdog watchdog;
  std::promise<void> started;
  std::promise<void> release;
  std::shared_future<void> release_f = release.get_future().share();
  std::atomic<bool> callback_done{false};
  auto timer = watchdog.NewTimer([&] {
    started.set_value();
    release_f.wait();
    callback_done = true;
  });
  timer->ArmAt(MonoClock::now());
  ASSERT_EQ(started.get_future().wait_for(kGenerous), std::future_status::ready);

  std::atomic<bool> disarmed{false};
  std::atomic<bool> done_seen{false};
  std::thread disarmer([&] {
    timer->Disarm();
    done_seen = callback_done.load();
    disarmed = true;
  });
  std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(disarmed.load()) << "Disarm returned while the callback was running";
  release.set_value();
  disarmer.join();
  EXPECT_TRUE(done_seen.load());
}

TEST(LegWatchdogTest, ReleasedTimerNeverFires) {
  LegWatchdog watchdog;
  auto fired = std::make_shared<std::atomic<int>>(0);
  {
    auto timer = watchdog.NewTimer([fired] { ++*fired; });
    timer->ArmAt(MonoClock::now() + 30ms);
  }
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(fired->load(), 0);
}

TEST(LegWatchdogTest, ManyTimersEachFireOnceNotEarlyAndDisarmedOnesNever) {
  constexpr int kTimers = 300;
  LegWatchdog watchdog;
  std::mt19937 rng(12345);
  std::uniform_int_distribution<int> ms(5, 300);
  struct Slot {
    MonoTime deadline;
    std::atomic<int> runs{0};
    std::atomic<bool> early{false};
    std::shared_ptr<LegWatchdog::Timer> timer;
  };
  std::vector<Slot> slots(kTimers);
  std::atomic<int> fired_total{0};
  std::promise<void> all_fired;
  const int expected_fires = kTimers / 2;
  for (int i = 0; i < kTimers; ++i) {
    Slot& s = slots[i];
    s.timer = watchdog.NewTimer([&s, &fired_total, &all_fired, expected_fires] {
      if (MonoClock::now() < s.deadline) s.early = true;
      ++s.runs;
      if (++fired_total == expected_fires) all_fired.set_value();
    });
  }
  // Timers that will be disarmed or re-armed start far enough out that the
  // second call always comes first. Every deadline is fixed before arming.
  const MonoTime base = MonoClock::now();
  std::vector<MonoTime> first(kTimers);
  for (int i = 0; i < kTimers; ++i) {
    const auto offset = std::chrono::milliseconds(ms(rng));
    if (i % 2 == 1) {  // disarmed
      first[i] = slots[i].deadline = base + 1s + offset;
    } else if (i % 4 == 0) {  // re-armed later
      first[i] = base + 1s + offset;
      slots[i].deadline = first[i] + 100ms;
    } else {  // armed once
      first[i] = slots[i].deadline = base + offset;
    }
  }
  for (int i = 0; i < kTimers; ++i) slots[i].timer->ArmAt(first[i]);
  for (int i = 1; i < kTimers; i += 2) slots[i].timer->Disarm();
  for (int i = 0; i < kTimers; i += 4) slots[i].timer->ArmAt(slots[i].deadline);
  ASSERT_EQ(all_fired.get_future().wait_for(kGenerous), std::future_status::ready);
  std::this_thread::sleep_until(base + 1500ms);  // past every disarmed deadline
  for (int i = 0; i < kTimers; ++i) {
    EXPECT_EQ(slots[i].runs.load(), i % 2 == 0 ? 1 : 0) << "timer " << i;
    EXPECT_FALSE(slots[i].early.load()) << "timer " << i << " fired before its deadline";
  }
  for (auto& s : slots) s.timer->Disarm();
}

TEST(LegWatchdogTest, DestroyingTheWatchdogWithArmedTimersIsPrompt) {
  std::atomic<int> runs{0};
  const MonoTime start = MonoClock::now();
  {
    LegWatchdog watchdog;
    auto timer = watchdog.NewTimer([&] { ++runs; });
    timer->ArmAt(MonoClock::now() + 60s);
  }
  EXPECT_LT(MonoClock::now() - start, 5s);
  EXPECT_EQ(runs.load(), 0);
}

}  // namespace
}  // namespace narwhal::engines
