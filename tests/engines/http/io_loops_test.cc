#include "engines/http/io_loops.h"

#include <gtest/gtest.h>
#include <time.h>

#include <boost/asio/post.hpp>
#include <chrono>
#include <future>

#include "engines/http/loop_placement.h"

namespace narwhal::engines {
namespace {

int64_t ThreadCpuNs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// Spends `ms` of the calling thread's CPU time.
void Spin(int ms) {
  const int64_t until = ThreadCpuNs() + int64_t{ms} * 1'000'000;
  volatile uint64_t sink = 0;
  while (ThreadCpuNs() < until) sink = sink + 1;
}

TEST(IoLoopsPlacementTest, AnIdlePoolPacksAndABusyLoopIsPassedOver) {
  LoopPlacementOptions options;
  options.busy_mark = 0.2;  // a loop that spins 200 ms over any wall time under a second is over it
  options.window = std::chrono::milliseconds(20);
  options.smoothing = std::chrono::nanoseconds(0);  // each window's load as it is
  IoLoops loops(2, options);
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(loops.Place() == loops.executor(0)) << i;

  // The first loop's thread burns CPU: the next window measures it busy.
  std::promise<void> spun;
  boost::asio::post(loops.executor(0), [&spun] {
    Spin(200);
    spun.set_value();
  });
  spun.get_future().wait();
  EXPECT_TRUE(loops.Place() == loops.executor(1));

  // Idle again over a later window: the first loop takes connections again.
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  loops.Place();  // closes the window that still held the spin
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_TRUE(loops.Place() == loops.executor(0));
}

TEST(IoLoopsPlacementTest, SpreadTakesTurnsWithoutMeasuring) {
  LoopPlacementOptions options;
  options.policy = Placement::kSpread;
  IoLoops loops(3, options);
  for (int i = 0; i < 6; ++i) EXPECT_TRUE(loops.Place() == loops.executor(i % 3)) << i;
}

}  // namespace
}  // namespace narwhal::engines
