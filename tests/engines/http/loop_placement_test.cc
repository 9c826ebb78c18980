#include "engines/http/loop_placement.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace narwhal::engines {
namespace {

constexpr int64_t kMs = 1'000'000;

// Two or more loops whose thread CPU clocks the test advances by hand.
struct PlacementRig {
  explicit PlacementRig(int loops, LoopPlacementOptions options = {})
      : placement(loops, options), cpu(static_cast<size_t>(loops), 0) {}
  int Pick() {
    return placement.Pick(now, [this](int i) {
      ++reads;
      return cpu[static_cast<size_t>(i)];
    });
  }
  // `ms` of wall time pass, loop i busy for busy_ms[i] of them.
  void Pass(int64_t ms, std::vector<int64_t> busy_ms) {
    now += ms * kMs;
    for (size_t i = 0; i < busy_ms.size(); ++i) cpu[i] += busy_ms[i] * kMs;
  }
  LoopPlacement placement;
  std::vector<int64_t> cpu;
  int64_t now = 1'000 * kMs;
  int reads = 0;
};

TEST(LoopPlacementTest, IdleLoopsFillInOrder) {
  PlacementRig rig(2);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(rig.Pick(), 0) << i;
  rig.Pass(10'000, {3'000, 0});  // 30% busy: under the mark
  for (int i = 0; i < 10; ++i) EXPECT_EQ(rig.Pick(), 0) << i;
  EXPECT_NEAR(rig.placement.busy(0), 0.3, 1e-3);
}

TEST(LoopPlacementTest, ALoopOverTheMarkTakesNoNewConnectionWhileAnotherIsUnder) {
  PlacementRig rig(3);
  EXPECT_EQ(rig.Pick(), 0);  // baseline sample
  // Spans of five seconds: the smoothed load is (nearly) the span's.
  rig.Pass(5'000, {3'000, 500, 0});
  EXPECT_EQ(rig.Pick(), 1);
  rig.Pass(5'000, {3'000, 2'750, 0});
  EXPECT_EQ(rig.Pick(), 2);
  rig.Pass(5'000, {1'000, 2'750, 3'500});  // the first loop calmed down: it is first again
  EXPECT_EQ(rig.Pick(), 0);
}

TEST(LoopPlacementTest, WhenEveryLoopIsOverTheMarkTheLeastBusyTakesIt) {
  PlacementRig rig(3);
  rig.Pick();
  rig.Pass(5'000, {4'500, 3'500, 4'000});
  EXPECT_EQ(rig.Pick(), 1);
  EXPECT_EQ(rig.Pick(), 1);
}

TEST(LoopPlacementTest, ABurstWithinOneWindowSpreads) {
  LoopPlacementOptions options;
  options.burst = 4;
  PlacementRig rig(2, options);
  std::vector<int> picks;
  for (int i = 0; i < 12; ++i) picks.push_back(rig.Pick());
  // Four on the first loop, four on the second, then turn about (every loop
  // took its burst: the one that took fewest).
  EXPECT_EQ(picks, (std::vector<int>{0, 0, 0, 0, 1, 1, 1, 1, 0, 1, 0, 1}));
  rig.Pass(100, {0, 0});  // a new window: the first loop again
  EXPECT_EQ(rig.Pick(), 0);
}

TEST(LoopPlacementTest, TheFirstSampleIsOnlyABaseline) {
  PlacementRig rig(2);
  rig.cpu = {50'000 * kMs, 0};  // CPU spent before the first placement
  EXPECT_EQ(rig.Pick(), 0);
  EXPECT_DOUBLE_EQ(rig.placement.busy(0), 0.0);
}

TEST(LoopPlacementTest, CpuClocksAreReadOncePerWindow) {
  PlacementRig rig(2);
  for (int i = 0; i < 5; ++i) rig.Pick();
  EXPECT_EQ(rig.reads, 2);  // the baseline, both loops
  rig.Pass(50, {0, 0});
  rig.Pick();
  EXPECT_EQ(rig.reads, 2);  // the window has not ended
  rig.Pass(50, {0, 0});
  rig.Pick();
  EXPECT_EQ(rig.reads, 4);
}

TEST(LoopPlacementTest, ALongQuietSpellMeasuresTheAverageOverIt) {
  PlacementRig rig(2);
  rig.Pick();
  rig.Pass(10'000, {6'000, 0});  // 60% over ten seconds
  EXPECT_EQ(rig.Pick(), 1);
  EXPECT_NEAR(rig.placement.busy(0), 0.6, 1e-3);
}

// Many streams starting at once make a loop briefly busy: one hot window
// does not move connections, a load that stays over the mark does within a
// second.
TEST(LoopPlacementTest, AShortSpikeDoesNotSpillButASustainedLoadDoes) {
  PlacementRig rig(2);
  rig.Pick();
  for (int i = 0; i < 20; ++i) {
    rig.Pass(100, {30, 0});
    EXPECT_EQ(rig.Pick(), 0);
  }
  rig.Pass(100, {95, 0});  // one window at 95%
  EXPECT_EQ(rig.Pick(), 0);
  EXPECT_LT(rig.placement.busy(0), 0.5);
  std::vector<int> picks;
  for (int i = 0; i < 10; ++i) {  // a second at 80%
    rig.Pass(100, {80, 0});
    picks.push_back(rig.Pick());
  }
  EXPECT_EQ(picks.front(), 0);
  EXPECT_EQ(picks.back(), 1);
  EXPECT_GT(rig.placement.busy(0), 0.5);
}

TEST(LoopPlacementTest, SpreadTakesTurns) {
  LoopPlacementOptions options;
  options.policy = Placement::kSpread;
  PlacementRig rig(3, options);
  std::vector<int> picks;
  for (int i = 0; i < 6; ++i) picks.push_back(rig.Pick());
  EXPECT_EQ(picks, (std::vector<int>{0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(rig.reads, 0);
}

}  // namespace
}  // namespace narwhal::engines
