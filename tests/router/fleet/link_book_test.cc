// LinkBook, the pure per-link health state machine (router/fleet/link_book.h):
// which links exist, attribution of crossed-decode evidence, the
// concentration rule (a link is held only while both of its engines work
// with other peers), the window, probes and their backoff. Plain MonoTime
// values: no clock, no sleeps, no sockets.
#include "router/fleet/link_book.h"

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "router/common/settings.h"
#include "tests/fakes/test_engine.h"

namespace narwhal::router {
namespace {

constexpr double kInterval = 2.0;  // recovery.readmit_interval_s
const MonoTime kT0 = MonoTime() + std::chrono::hours(100);

MonoTime At(double s) { return kT0 + engines::FromSeconds(s); }

using ::narwhal::testing::Engine;

// p0, p1 (prefill), d0, d1 (decode).
std::vector<EngineSettings> TwoByTwo() {
  return {Engine("p0", Role::kPrefill), Engine("p1", Role::kPrefill), Engine("d0", Role::kDecode),
          Engine("d1", Role::kDecode)};
}

LinkSettings Links(int hold_after = 3, double window_s = 60) {
  LinkSettings s;
  s.hold_after = hold_after;
  s.window_s = window_s;
  return s;
}

LinkBook Book(const LinkSettings& s = Links()) { return LinkBook(TwoByTwo(), s, kInterval); }

bool AllServing(const std::string&) { return true; }
const std::function<bool(const std::string&)> kAllServing = AllServing;

// Every engine serves but `out`.
std::function<bool(const std::string&)> AllBut(const std::string& out) {
  return [out](const std::string& iid) { return iid != out; };
}

// A link exists once there is evidence about it, only for role-permitted
// pairs of distinct engines in the fleet (a fleet of N engines would
// otherwise hold N^2 links from the start).
TEST(LinkBookTest, KeepsOnlyRolePermittedPairsWithEvidence) {
  LinkBook book({Engine("p0", Role::kPrefill), Engine("b0", Role::kBoth),
                 Engine("d0", Role::kDecode)},
                Links(), kInterval);
  EXPECT_EQ(book.size(), 0u);
  EXPECT_EQ(book.Find("p0", "d0"), -1);
  book.RecordSuccess("p0", "b0", At(1));
  book.RecordSuccess("p0", "d0", At(1));
  book.RecordFailure("b0", "d0", "x", At(2));
  book.RecordSuccess("b0", "b0", At(2));  // a same-engine decode is no link
  book.RecordSuccess("d0", "p0", At(2));  // the roles do not permit it
  book.RecordSuccess("p0", "x9", At(2));  // not in the fleet
  EXPECT_EQ(book.size(), 3u);  // p0->b0, p0->d0, b0->d0
  EXPECT_GE(book.Find("p0", "b0"), 0);
  EXPECT_GE(book.Find("p0", "d0"), 0);
  EXPECT_GE(book.Find("b0", "d0"), 0);
  EXPECT_EQ(book.Find("b0", "b0"), -1);
  EXPECT_EQ(book.Find("d0", "p0"), -1);
  EXPECT_EQ(book.Find("p0", "x9"), -1);
  const Link& first = book.link(static_cast<size_t>(book.Find("p0", "b0")));
  EXPECT_EQ(first.state, LinkState::kServing);
  EXPECT_EQ(first.since, At(1));
  // An engine that leaves takes its links along; one whose role changed
  // keeps only what its new role permits.
  book.SetEngines({Engine("p0", Role::kPrefill), Engine("b0", Role::kPrefill)});
  EXPECT_EQ(book.size(), 0u);
  EXPECT_EQ(book.Find("p0", "b0"), -1);
}

TEST(LinkBookTest, FailuresConcentratedOnOneLinkHoldIt) {
  LinkBook book = Book();
  EXPECT_TRUE(book.RecordFailure("p0", "d0", "engine_error: boom", At(1)).empty());
  book.RecordSuccess("p0", "d1", At(2));  // the producer works with another consumer
  book.RecordSuccess("p1", "d0", At(3));  // the consumer works with another producer
  EXPECT_TRUE(book.RecordFailure("p0", "d0", "engine_error: boom", At(4)).empty());
  EXPECT_FALSE(book.Held("p0", "d0"));
  const std::vector<LinkEvent> events = book.RecordFailure("p0", "d0", "engine_error: boom", At(5));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, FleetEventKind::kLinkHeld);
  EXPECT_EQ(events[0].producer, "p0");
  EXPECT_EQ(events[0].consumer, "d0");
  EXPECT_NE(events[0].cause.find("3 consecutive failed decodes"), std::string::npos)
      << events[0].cause;
  EXPECT_NE(events[0].cause.find("d1"), std::string::npos) << events[0].cause;
  EXPECT_NE(events[0].cause.find("p1"), std::string::npos) << events[0].cause;
  EXPECT_TRUE(book.Held("p0", "d0"));
  EXPECT_FALSE(book.Held("p0", "d1"));
  EXPECT_FALSE(book.Held("p1", "d0"));
  const Link& l = book.link(book.Find("p0", "d0"));
  EXPECT_EQ(l.since, At(5));
  EXPECT_EQ(l.failures, 3);
  EXPECT_EQ(l.streak, 3);
  EXPECT_EQ(l.last_failure_detail, "engine_error: boom");
  // Further failures change nothing (no second event).
  EXPECT_TRUE(book.RecordFailure("p0", "d0", "x", At(6)).empty());
}

TEST(LinkBookTest, AProducerFailingWithEveryConsumerIsTheProducersFaultNotALinks) {
  LinkBook book = Book();
  book.RecordSuccess("p1", "d0", At(0.5));
  book.RecordSuccess("p1", "d1", At(0.5));
  for (int k = 1; k <= 5; ++k) {
    book.RecordSuccess("p1", "d0", At(k));  // the consumers work with p1
    book.RecordSuccess("p1", "d1", At(k));
    EXPECT_TRUE(book.RecordFailure("p0", "d0", "x", At(k + 0.1)).empty());
    EXPECT_TRUE(book.RecordFailure("p0", "d1", "x", At(k + 0.2)).empty());
  }
  EXPECT_FALSE(book.Held("p0", "d0"));
  EXPECT_FALSE(book.Held("p0", "d1"));
}

TEST(LinkBookTest, AConsumerFailingWithEveryProducerIsTheConsumersFaultNotALinks) {
  LinkBook book = Book();
  for (int k = 1; k <= 5; ++k) {
    book.RecordSuccess("p0", "d1", At(k));  // the producers work with d1
    book.RecordSuccess("p1", "d1", At(k));
    EXPECT_TRUE(book.RecordFailure("p0", "d0", "x", At(k + 0.1)).empty());
    EXPECT_TRUE(book.RecordFailure("p1", "d0", "x", At(k + 0.2)).empty());
  }
  EXPECT_FALSE(book.Held("p0", "d0"));
  EXPECT_FALSE(book.Held("p1", "d0"));
}

TEST(LinkBookTest, SuccessesBeforeTheStreakBeganDoNotExonerateTheEngines) {
  LinkBook book = Book();
  book.RecordSuccess("p0", "d1", At(0));  // before the failures: P may have broken since
  book.RecordSuccess("p1", "d0", At(0));
  for (int k = 1; k <= 4; ++k) EXPECT_TRUE(book.RecordFailure("p0", "d0", "x", At(k)).empty());
  EXPECT_FALSE(book.Held("p0", "d0"));
  // Once both engines succeed elsewhere during the streak, the next failure holds.
  book.RecordSuccess("p0", "d1", At(5));
  book.RecordSuccess("p1", "d0", At(5));
  EXPECT_EQ(book.RecordFailure("p0", "d0", "x", At(6)).size(), 1u);
  EXPECT_TRUE(book.Held("p0", "d0"));
}

TEST(LinkBookTest, SuccessesOlderThanTheWindowDoNotCount) {
  LinkBook book = Book(Links(3, 10));
  book.RecordFailure("p0", "d0", "x", At(0));
  book.RecordSuccess("p0", "d1", At(1));
  book.RecordSuccess("p1", "d0", At(1));
  book.RecordFailure("p0", "d0", "x", At(2));
  EXPECT_TRUE(book.RecordFailure("p0", "d0", "x", At(20)).empty());  // 19 s > 10 s ago
  EXPECT_FALSE(book.Held("p0", "d0"));
  book.RecordSuccess("p0", "d1", At(25));
  book.RecordSuccess("p1", "d0", At(26));
  EXPECT_EQ(book.RecordFailure("p0", "d0", "x", At(30)).size(), 1u);
}

TEST(LinkBookTest, ALinkSuccessEndsTheStreak) {
  LinkBook book = Book();
  book.RecordSuccess("p0", "d1", At(1));
  book.RecordSuccess("p1", "d0", At(1));
  book.RecordFailure("p0", "d0", "x", At(0.5));
  book.RecordFailure("p0", "d0", "x", At(2));
  book.RecordSuccess("p0", "d0", At(3));
  EXPECT_EQ(book.link(book.Find("p0", "d0")).streak, 0);
  EXPECT_TRUE(book.RecordFailure("p0", "d0", "x", At(5)).empty());
  book.RecordSuccess("p0", "d1", At(5.5));
  book.RecordSuccess("p1", "d0", At(5.5));
  EXPECT_TRUE(book.RecordFailure("p0", "d0", "x", At(6)).empty());
  EXPECT_FALSE(book.Held("p0", "d0"));
  EXPECT_EQ(book.RecordFailure("p0", "d0", "x", At(7)).size(), 1u);
  EXPECT_EQ(book.link(book.Find("p0", "d0")).successes, 1);
  EXPECT_EQ(book.link(book.Find("p0", "d0")).failures, 5);
}

// Holds p0->d0 at At(3).
void HoldP0D0(LinkBook& book) {
  book.RecordFailure("p0", "d0", "x", At(0));
  book.RecordSuccess("p0", "d1", At(1));
  book.RecordSuccess("p1", "d0", At(1));
  book.RecordFailure("p0", "d0", "x", At(2));
  ASSERT_EQ(book.RecordFailure("p0", "d0", "x", At(3)).size(), 1u);
}

TEST(LinkBookTest, AHeldLinkIsProbedAtOnceAndReadmittedByAPassedProbe) {
  LinkBook book = Book();
  EXPECT_TRUE(book.TakeDueProbes(At(3), kAllServing).empty());  // nothing held
  HoldP0D0(book);
  std::vector<LinkProbeTask> tasks = book.TakeDueProbes(At(3), kAllServing);
  ASSERT_EQ(tasks.size(), 1u);
  EXPECT_EQ(tasks[0].link, static_cast<size_t>(book.Find("p0", "d0")));
  EXPECT_EQ(tasks[0].producer, "p0");
  EXPECT_EQ(tasks[0].consumer, "d0");
  EXPECT_TRUE(book.TakeDueProbes(At(4), kAllServing).empty());  // running
  std::vector<LinkEvent> events =
      book.CompleteProbe(tasks[0].link, LinkProbeOutcome::kPassed, "d0 decoded", At(4));
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].kind, FleetEventKind::kLinkProbe);
  EXPECT_EQ(events[0].outcome, LinkProbeOutcome::kPassed);
  EXPECT_EQ(events[1].kind, FleetEventKind::kLinkReadmitted);
  EXPECT_EQ(events[1].cause, "probe passed");
  EXPECT_FALSE(book.Held("p0", "d0"));
  const Link& l = book.link(tasks[0].link);
  EXPECT_EQ(l.since, At(4));
  EXPECT_EQ(l.streak, 0);
  EXPECT_TRUE(book.TakeDueProbes(At(100), kAllServing).empty());
}

TEST(LinkBookTest, FailedProbesBackOffAndInconclusiveOnesKeepTheCadence) {
  LinkBook book = Book();
  HoldP0D0(book);
  const size_t k = static_cast<size_t>(book.Find("p0", "d0"));
  ASSERT_EQ(book.TakeDueProbes(At(3), kAllServing).size(), 1u);
  std::vector<LinkEvent> events = book.CompleteProbe(k, LinkProbeOutcome::kFailed, "no", At(3));
  ASSERT_EQ(events.size(), 1u);  // the probe only: still held
  EXPECT_TRUE(book.Held("p0", "d0"));
  EXPECT_TRUE(book.TakeDueProbes(At(3 + kInterval - 0.1), kAllServing).empty());
  ASSERT_EQ(book.TakeDueProbes(At(3 + kInterval), kAllServing).size(), 1u);
  book.CompleteProbe(k, LinkProbeOutcome::kFailed, "no", At(5));
  EXPECT_EQ(book.link(k).probe_failures, 2);
  EXPECT_TRUE(book.TakeDueProbes(At(5 + 2 * kInterval - 0.1), kAllServing).empty());
  ASSERT_EQ(book.TakeDueProbes(At(5 + 2 * kInterval), kAllServing).size(), 1u);
  book.CompleteProbe(k, LinkProbeOutcome::kInconclusive, "p0 failed", At(9));
  EXPECT_EQ(book.link(k).probe_failures, 2);
  EXPECT_TRUE(book.TakeDueProbes(At(9 + kInterval - 0.1), kAllServing).empty());
  EXPECT_EQ(book.TakeDueProbes(At(9 + kInterval), kAllServing).size(), 1u);
  EXPECT_TRUE(book.Held("p0", "d0"));
}

TEST(LinkBookTest, AProbeWaitsWhileAnEngineOfTheLinkIsOutOfPlacement) {
  LinkBook book = Book();
  HoldP0D0(book);
  EXPECT_TRUE(book.TakeDueProbes(At(3), AllBut("d0")).empty());
  EXPECT_TRUE(book.TakeDueProbes(At(3), AllBut("p0")).empty());
  EXPECT_EQ(book.TakeDueProbes(At(4), kAllServing).size(), 1u);
}

TEST(LinkBookTest, HoldAfterIsTheStreakLength) {
  LinkBook book = Book(Links(1, 60));
  book.RecordFailure("p0", "d0", "x", At(0));  // the streak's start precedes the successes
  book.RecordSuccess("p0", "d1", At(1));
  book.RecordSuccess("p1", "d0", At(1));
  book.RecordSuccess("p0", "d0", At(1.5));
  EXPECT_EQ(book.RecordFailure("p0", "d0", "x", At(2)).size(), 0u);  // successes predate it
  book.RecordSuccess("p0", "d1", At(3));
  book.RecordSuccess("p1", "d0", At(3));
  EXPECT_EQ(book.RecordFailure("p0", "d0", "x", At(4)).size(), 1u);
}

}  // namespace
}  // namespace narwhal::router
