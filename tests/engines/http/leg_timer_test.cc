// LegTimer on fake time: the one timer of an engine leg (B12 first-token
// budget, B13 read timeout with per-chunk re-arm and back-pressure pauses,
// deadlines). No test sleeps: FakeClock::Advance fires the timers.
#include "engines/http/leg_timer.h"

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>

#include "tests/fakes/fake_clock.h"

namespace narwhal::engines {
namespace {

using namespace std::chrono_literals;

class LegTimerTest : public ::testing::Test {
 protected:
  // Runs what the clock posted.
  void Run() {
    context_.restart();
    context_.poll();
  }

  boost::asio::io_context context_;
  testing::FakeClock clock_;
  int expired_ = 0;
  LegTimer timer_{clock_, context_.get_executor(), [this] { ++expired_; }};
};

TEST_F(LegTimerTest, B12_ExpiresAtItsDeadlineWithItsBound) {
  timer_.Arm(clock_.Now() + 2500ms, LegBound::kFirstToken);
  clock_.Advance(2499ms);
  Run();
  EXPECT_EQ(expired_, 0);
  EXPECT_FALSE(timer_.fired());
  clock_.Advance(1ms);
  Run();
  EXPECT_EQ(expired_, 1);
  EXPECT_EQ(timer_.fired_bound(), LegBound::kFirstToken);
  clock_.Advance(1h);
  Run();
  EXPECT_EQ(expired_, 1) << "fires once";
}

TEST_F(LegTimerTest, B13_ReArmingPerChunkPushesTheExpiryWithoutANewWait) {
  timer_.Arm(clock_.Now() + 10s, LegBound::kRead);
  for (int chunk = 0; chunk < 100; ++chunk) {  // a chunk every 5 s keeps it alive
    clock_.Advance(5s);
    Run();
    timer_.Arm(clock_.Now() + 10s, LegBound::kRead);
  }
  EXPECT_EQ(expired_, 0);
  EXPECT_LE(clock_.pending_timers(), 1u);
  clock_.Advance(9999ms);
  Run();
  EXPECT_EQ(expired_, 0);
  clock_.Advance(1ms);
  Run();
  EXPECT_EQ(expired_, 1);
  EXPECT_EQ(timer_.fired_bound(), LegBound::kRead);
}

TEST_F(LegTimerTest, B13_PauseSuspendsExpiryUntilReArmed) {
  timer_.Arm(clock_.Now() + 10s, LegBound::kRead);
  timer_.Pause();  // a slow client holds the stream: not engine silence
  clock_.Advance(1h);
  Run();
  EXPECT_EQ(expired_, 0);
  timer_.Arm(clock_.Now() + 10s, LegBound::kRead);
  clock_.Advance(10s);
  Run();
  EXPECT_EQ(expired_, 1);
}

TEST_F(LegTimerTest, AnEarlierDeadlineReplacesTheWait) {
  timer_.Arm(clock_.Now() + 10s, LegBound::kConnect);
  timer_.Arm(clock_.Now() + 2s, LegBound::kRequest);
  clock_.Advance(2s);
  Run();
  EXPECT_EQ(expired_, 1);
  EXPECT_EQ(timer_.fired_bound(), LegBound::kRequest);
}

TEST_F(LegTimerTest, StopMeansNoExpiry) {
  timer_.Arm(clock_.Now() + 1s, LegBound::kLeg);
  timer_.Stop();
  timer_.Arm(clock_.Now() + 1s, LegBound::kLeg);  // ignored after Stop
  clock_.Advance(1h);
  Run();
  EXPECT_EQ(expired_, 0);
  EXPECT_FALSE(timer_.fired());
}

TEST_F(LegTimerTest, DestroyedWithAPendingWaitIsSafe) {
  int expired = 0;
  {
    LegTimer timer(clock_, context_.get_executor(), [&] { ++expired; });
    timer.Arm(clock_.Now() + 1s, LegBound::kRead);
  }
  clock_.Advance(1h);
  Run();
  EXPECT_EQ(expired, 0);
  EXPECT_EQ(clock_.pending_timers(), 0u);
}

TEST_F(LegTimerTest, AlreadyPassedDeadlineExpiresOnTheNextLoopTurn) {
  timer_.Arm(clock_.Now() - 1s, LegBound::kRequest);
  EXPECT_EQ(expired_, 0);  // never inline
  Run();
  EXPECT_EQ(expired_, 1);
}

}  // namespace
}  // namespace narwhal::engines
