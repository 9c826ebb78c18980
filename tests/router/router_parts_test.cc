// The router core's pure parts: Placement, RetryBudget, BreakerBook and Fleet.
#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "router/common/log.h"
#include "router/common/metrics.h"
#include "router/common/settings.h"
#include "router/fleet/breaker_book.h"
#include "router/fleet/fleet.h"
#include "router/fleet/placement.h"
#include "router/retry_budget.h"
#include "tests/fakes/fake_clock.h"
#include "tests/fakes/test_engine.h"
#include "tests/router/test_util.h"

namespace narwhal::router {
namespace {

namespace nt = ::narwhal::testing;
using namespace std::chrono_literals;
using engines::BreakerClass;

using ::narwhal::testing::Engine;

// ---------------------------------------------------------------------------
// Placement

TEST(PlacementTest, NoCandidateNoChoice) { EXPECT_FALSE(ChooseLeastLoaded({}, 0).has_value()); }

TEST(PlacementTest, LeastInflightWinsWhateverTheRotation) {
  const std::vector<Candidate> c = {{0, 3, false}, {1, 1, false}, {2, 2, false}};
  for (size_t rotation = 0; rotation < 6; ++rotation) {
    EXPECT_EQ(ChooseLeastLoaded(c, rotation), 1u) << rotation;
  }
}

TEST(PlacementTest, TiesRotate) {
  const std::vector<Candidate> c = {{0, 1, false}, {1, 1, false}, {2, 1, false}};
  EXPECT_EQ(ChooseLeastLoaded(c, 0), 0u);
  EXPECT_EQ(ChooseLeastLoaded(c, 1), 1u);
  EXPECT_EQ(ChooseLeastLoaded(c, 2), 2u);
  EXPECT_EQ(ChooseLeastLoaded(c, 3), 0u);
  // Among the tied least loaded only.
  const std::vector<Candidate> d = {{0, 0, false}, {1, 5, false}, {2, 0, false}};
  EXPECT_EQ(ChooseLeastLoaded(d, 1), 2u);
  EXPECT_EQ(ChooseLeastLoaded(d, 3), 0u);
}

TEST(PlacementTest, AvoidedCandidateOnlyWhenNothingElse) {
  // B5: decode stays off its producer even when the producer is idle.
  const std::vector<Candidate> c = {{0, 0, true}, {1, 7, false}};
  EXPECT_EQ(ChooseLeastLoaded(c, 0), 1u);
  EXPECT_EQ(ChooseLeastLoaded(c, 1), 1u);
  const std::vector<Candidate> only = {{4, 9, true}};
  EXPECT_EQ(ChooseLeastLoaded(only, 5), 0u);
}

// ---------------------------------------------------------------------------
// RetryBudget

TEST(RetryBudgetTest, StartsFullAndSpendsWholeCredits) {
  RetryBudget b(2, 0.1);
  EXPECT_EQ(b.credits(), 2);
  EXPECT_TRUE(b.TryAcquire());
  EXPECT_TRUE(b.TryAcquire());
  EXPECT_FALSE(b.TryAcquire());
  EXPECT_EQ(b.credits(), 0);
}

TEST(RetryBudgetTest, TenReplenishmentsOfATenthMakeACredit) {
  RetryBudget b(1, 0.1);
  ASSERT_TRUE(b.TryAcquire());
  for (int i = 0; i < 9; ++i) b.OnSuccess();
  EXPECT_FALSE(b.TryAcquire());  // 0.9
  b.OnSuccess();                 // 0.1 * 10 in floating point is just under 1
  EXPECT_TRUE(b.TryAcquire());
  EXPECT_NEAR(b.credits(), 0, 1e-9);
}

TEST(RetryBudgetTest, CapAppliesToReplenishAndRefund) {
  RetryBudget b(2, 0.5);
  b.OnSuccess();
  EXPECT_EQ(b.credits(), 2);
  b.Refund();
  EXPECT_EQ(b.credits(), 2);
  ASSERT_TRUE(b.TryAcquire());
  EXPECT_EQ(b.credits(), 1);
  b.Refund();
  EXPECT_EQ(b.credits(), 2);
}

TEST(RetryBudgetTest, ZeroBudgetNeverRetries) {
  RetryBudget b(0, 0.1);
  b.OnSuccess();
  EXPECT_FALSE(b.TryAcquire());
}

// ---------------------------------------------------------------------------
// BreakerBook

class BreakerBookTest : public ::testing::Test {
 protected:
  // Evidence against engine `i`; true if it started a timed quarantine.
  static bool Fail(BreakerBook& book, size_t i, BreakerClass cls, engines::MonoTime now,
                   const std::string& cause = "x", std::vector<BreakerEvent>* events = nullptr) {
    bool quarantined = false;
    for (BreakerEvent& e : book.RecordFailure(i, cls, Phase::kDecode, "p0", cause, now)) {
      quarantined = quarantined || (e.kind == FleetEventKind::kEngineHoldStarted &&
                                    e.hold_kind == HoldKind::kTimed);
      if (events != nullptr) events->push_back(std::move(e));
    }
    return quarantined;
  }
  static RecoverySettings Quarantine(double s) {
    RecoverySettings r;
    r.failure_quarantine_s = s;
    return r;
  }

  engines::MonoTime t0_ = engines::MonoTime(std::chrono::hours(1));
};

TEST_F(BreakerBookTest, FailuresCountPerClass) {
  BreakerBook book({Engine("e0", Role::kBoth)}, RecoverySettings{});
  EXPECT_FALSE(Fail(book, 0, BreakerClass::kStream, t0_));
  Fail(book, 0, BreakerClass::kStream, t0_);
  Fail(book, 0, BreakerClass::kTimeout, t0_);
  Fail(book, 0, BreakerClass::kNone, t0_);  // no evidence
  const auto& s = book.engine(0).streak;
  EXPECT_EQ(s[static_cast<int>(BreakerClass::kStream)], 2);
  EXPECT_EQ(s[static_cast<int>(BreakerClass::kTimeout)], 1);
  EXPECT_EQ(s[static_cast<int>(BreakerClass::kNone)], 0);
  EXPECT_EQ(book.Find("e0"), 0);
  EXPECT_EQ(book.Find("nope"), -1);
}

struct ClearingCase {
  const char* name;
  Success success;
  std::vector<BreakerClass> cleared;
};

class BreakerClearingTest : public BreakerBookTest,
                            public ::testing::WithParamInterface<ClearingCase> {};

TEST_P(BreakerClearingTest, B17_SuccessClearsExactlyItsClasses) {
  BreakerBook book({Engine("e0", Role::kBoth)}, RecoverySettings{});
  for (int c = 1; c < engines::kBreakerClassCount; ++c) {
    Fail(book, 0, static_cast<BreakerClass>(c), t0_);
  }
  book.RecordSuccess(0, GetParam().success);
  const auto& cleared = GetParam().cleared;
  for (int c = 1; c < engines::kBreakerClassCount; ++c) {
    const bool expect_cleared =
        std::find(cleared.begin(), cleared.end(), static_cast<BreakerClass>(c)) != cleared.end();
    EXPECT_EQ(book.engine(0).streak[c], expect_cleared ? 0 : 1)
        << engines::BreakerClassName(static_cast<BreakerClass>(c));
  }
}

INSTANTIATE_TEST_SUITE_P(
    ReferenceTable, BreakerClearingTest,
    ::testing::Values(
        ClearingCase{"EngineRejected",
                     Success::kEngineRejected,
                     {BreakerClass::kConnection, BreakerClass::kInferenceStatus}},
        ClearingCase{"Health", Success::kHealth, {BreakerClass::kLiveness}},
        ClearingCase{"Liveness", Success::kLiveness, {BreakerClass::kLiveness}},
        ClearingCase{"PrefillHandoff",
                     Success::kPrefillHandoff,
                     {BreakerClass::kConnection, BreakerClass::kTimeout, BreakerClass::kOverload,
                      BreakerClass::kInferenceStatus, BreakerClass::kKvHandoff}},
        ClearingCase{"DecodeDone",
                     Success::kDecodeDone,
                     {BreakerClass::kConnection, BreakerClass::kTimeout, BreakerClass::kOverload,
                      BreakerClass::kInferenceStatus, BreakerClass::kStream}}),
    [](const ::testing::TestParamInfo<ClearingCase>& info) { return info.param.name; });

TEST_F(BreakerBookTest, B15_QuarantineStartsAndExpires) {
  BreakerBook book(
      {Engine("p0", Role::kPrefill), Engine("p1", Role::kPrefill), Engine("d0", Role::kDecode)},
      Quarantine(5));
  EXPECT_TRUE(Fail(book, 0, BreakerClass::kConnection, t0_, "prefill x"));
  EXPECT_EQ(book.State(0, t0_), PlacementState::kQuarantined);
  EXPECT_FALSE(book.Eligible(0, /*prefill=*/true, t0_ + 4999ms));
  EXPECT_EQ(book.EligibleCount(/*prefill=*/true, t0_), 1);
  EXPECT_EQ(book.engine(0).quarantine->cause, "prefill x");
  EXPECT_EQ(book.State(0, t0_ + 5s), PlacementState::kServing);
  EXPECT_TRUE(book.Eligible(0, true, t0_ + 5s));
  // A failure while quarantined does not extend it.
  ASSERT_TRUE(Fail(book, 1, BreakerClass::kConnection, t0_ + 6s));
  EXPECT_FALSE(Fail(book, 1, BreakerClass::kConnection, t0_ + 7s));
  EXPECT_EQ(book.State(1, t0_ + 11s), PlacementState::kServing);
  const auto ended = book.ExpireQuarantines(t0_ + 11s);
  ASSERT_EQ(ended.size(), 2u);
  EXPECT_EQ(ended[0].cause, "expired");
}

TEST_F(BreakerBookTest, B15_QuarantineOffWhenZero) {
  BreakerBook book({Engine("p0", Role::kPrefill), Engine("p1", Role::kPrefill)},
                   RecoverySettings{});
  EXPECT_FALSE(Fail(book, 0, BreakerClass::kConnection, t0_));
  EXPECT_EQ(book.State(0, t0_), PlacementState::kServing);
}

TEST_F(BreakerBookTest, B15_LastEngineOfARoleStaysInPlacement) {
  // e0 is the only decode-capable engine: it stays even though p1 prefills.
  BreakerBook book({Engine("e0", Role::kBoth), Engine("p1", Role::kPrefill)}, Quarantine(5));
  EXPECT_FALSE(Fail(book, 0, BreakerClass::kStream, t0_));
  EXPECT_EQ(book.State(0, t0_), PlacementState::kServing);
  // p1 may go: e0 still prefills.
  EXPECT_TRUE(Fail(book, 1, BreakerClass::kInferenceStatus, t0_));
  // With p1 out, e0 is also the last prefill engine.
  EXPECT_TRUE(book.IsLastForARole(0, t0_ + 1s));

  BreakerBook pair({Engine("d0", Role::kDecode), Engine("d1", Role::kDecode)}, Quarantine(5));
  EXPECT_TRUE(Fail(pair, 0, BreakerClass::kStream, t0_));
  EXPECT_FALSE(Fail(pair, 1, BreakerClass::kStream, t0_));  // last left
  EXPECT_EQ(pair.EligibleCount(/*prefill=*/false, t0_), 1);
}

TEST_F(BreakerBookTest, EligibilityFollowsRoles) {
  BreakerBook book(
      {Engine("p", Role::kPrefill), Engine("d", Role::kDecode), Engine("b", Role::kBoth)},
      RecoverySettings{});
  EXPECT_TRUE(book.Eligible(0, true, t0_));
  EXPECT_FALSE(book.Eligible(0, false, t0_));
  EXPECT_FALSE(book.Eligible(1, true, t0_));
  EXPECT_TRUE(book.Eligible(1, false, t0_));
  EXPECT_TRUE(book.Eligible(2, true, t0_));
  EXPECT_TRUE(book.Eligible(2, false, t0_));
  EXPECT_EQ(book.EligibleCount(true, t0_), 2);
  EXPECT_EQ(book.EligibleCount(false, t0_), 2);
}

TEST_F(BreakerBookTest, ReleaseQuarantineEndsItEarly) {
  BreakerBook book({Engine("p0", Role::kPrefill), Engine("p1", Role::kPrefill)}, Quarantine(5));
  ASSERT_TRUE(Fail(book, 0, BreakerClass::kTimeout, t0_));
  EXPECT_FALSE(book.ReleaseQuarantine(0, "operator").empty());
  EXPECT_EQ(book.State(0, t0_), PlacementState::kServing);
  EXPECT_TRUE(book.ReleaseQuarantine(0, "operator").empty());
}

TEST_F(BreakerBookTest, B17_StreamStreakHoldsUntilAnInferenceProbePasses) {
  BreakerBook book(
      {Engine("p0", Role::kPrefill), Engine("d0", Role::kDecode), Engine("d1", Role::kDecode)},
      RecoverySettings{});  // eject_after 3
  Fail(book, 1, BreakerClass::kStream, t0_);
  Fail(book, 1, BreakerClass::kStream, t0_);
  EXPECT_EQ(book.State(1, t0_), PlacementState::kServing);
  std::vector<BreakerEvent> events;
  Fail(book, 1, BreakerClass::kStream, t0_, "decode engine_timeout: silent", &events);
  EXPECT_EQ(book.State(1, t0_), PlacementState::kHeld);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events[0].kind, FleetEventKind::kEngineHoldStarted);
  EXPECT_EQ(events[0].hold_kind, HoldKind::kInference);
  EXPECT_EQ(book.RecordedProducer(1), "p0");
  EXPECT_EQ(book.ProbeSide(1), Phase::kDecode);
  // The probe is due at once (no engine idle: no liveness sweeps).
  const auto tasks = book.TakeDueProbes(t0_, {false, false, false});
  ASSERT_EQ(tasks.size(), 1u);
  EXPECT_EQ(tasks[0].index, 1u);
  EXPECT_EQ(tasks[0].kind, ProbeKind::kInference);
  book.CompleteProbe(1, ProbeKind::kInference, ProbeOutcome::kPassed, "", "p0", t0_ + 1s);
  EXPECT_EQ(book.State(1, t0_ + 1s), PlacementState::kServing);
  EXPECT_EQ(book.engine(1).streak[static_cast<int>(BreakerClass::kStream)], 0);
}

TEST_F(BreakerBookTest, B17_LastEngineOfARoleIsNeverHeld) {
  BreakerBook book({Engine("p0", Role::kPrefill), Engine("d0", Role::kDecode)}, RecoverySettings{});
  std::vector<BreakerEvent> events;
  for (int i = 0; i < 3; ++i) Fail(book, 1, BreakerClass::kStream, t0_, "x", &events);
  EXPECT_EQ(book.State(1, t0_), PlacementState::kServing);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().kind, FleetEventKind::kEngineHoldSuppressed);
}

TEST_F(BreakerBookTest, B17_ConnectionStreakEjectsEvenTheLastEngine) {
  BreakerBook book({Engine("p0", Role::kPrefill), Engine("d0", Role::kDecode)}, RecoverySettings{});
  for (int i = 0; i < 2; ++i) Fail(book, 1, BreakerClass::kConnection, t0_);
  EXPECT_EQ(book.State(1, t0_), PlacementState::kServing);
  std::vector<BreakerEvent> events;
  Fail(book, 1, BreakerClass::kConnection, t0_, "x", &events);
  EXPECT_EQ(book.State(1, t0_), PlacementState::kEjected);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events[0].kind, FleetEventKind::kEngineEjected);
  EXPECT_EQ(events[0].cause, "connection");
}

TEST_F(BreakerBookTest, B17_TimeoutStreakAsksForAHealthProbeOnly) {
  BreakerBook book(
      {Engine("p0", Role::kPrefill), Engine("p1", Role::kPrefill), Engine("d0", Role::kDecode)},
      RecoverySettings{});
  for (int i = 0; i < 3; ++i) Fail(book, 0, BreakerClass::kTimeout, t0_);
  EXPECT_EQ(book.State(0, t0_), PlacementState::kServing);
  const auto tasks = book.TakeDueProbes(t0_, {false, false, false});
  ASSERT_EQ(tasks.size(), 1u);
  EXPECT_EQ(tasks[0].kind, ProbeKind::kHealth);
  book.CompleteProbe(0, ProbeKind::kHealth, ProbeOutcome::kPassed, "", "", t0_);
  EXPECT_EQ(book.State(0, t0_), PlacementState::kServing);
  // A health check does not clear inference evidence; a served leg does.
  EXPECT_EQ(book.engine(0).streak[static_cast<int>(BreakerClass::kTimeout)], 3);
  book.RecordSuccess(0, Success::kPrefillHandoff);
  EXPECT_EQ(book.engine(0).streak[static_cast<int>(BreakerClass::kTimeout)], 0);
}

TEST_F(BreakerBookTest, B17_StreamEvidenceHoldsAtMostHalfOfARole) {
  BreakerBook book({Engine("p0", Role::kPrefill), Engine("d0", Role::kDecode),
                    Engine("d1", Role::kDecode), Engine("d2", Role::kDecode)},
                   RecoverySettings{});
  for (int i = 0; i < 3; ++i) Fail(book, 1, BreakerClass::kStream, t0_);
  EXPECT_EQ(book.State(1, t0_), PlacementState::kHeld);
  for (int i = 0; i < 3; ++i) Fail(book, 2, BreakerClass::kStream, t0_);
  EXPECT_EQ(book.State(2, t0_), PlacementState::kServing);  // two of three would be held
}

// ---------------------------------------------------------------------------
// Fleet

class FleetTest : public ::testing::Test {
 protected:
  FleetTest() : metrics_(registry_) {
    settings_.model = "m";
    settings_.engines = {Engine("p0", Role::kPrefill), Engine("p1", Role::kPrefill),
                         Engine("d0", Role::kDecode), Engine("d1", Role::kDecode)};
  }
  // The gauge as a scrape sees it: the fleet publishes the engines' load
  // (atomics the request path keeps) before every scrape.
  double Inflight(Fleet& fleet, const std::string& iid, const std::string& phase) {
    fleet.admin().PublishAll();
    return nt::MetricValue(registry_, "narwhal_engine_inflight", {{"iid", iid}, {"phase", phase}});
  }

  Settings settings_;
  nt::FakeClock clock_;
  prometheus::Registry registry_;
  Metrics metrics_;
};

TEST_F(FleetTest, B7_ReservationIsCountedAndReleasedOnce) {
  Fleet fleet(settings_, clock_, &metrics_);
  {
    std::optional<Fleet::Reservation> r = fleet.PickAndReserve(Phase::kPrefill, {});
    ASSERT_TRUE(r.has_value());
    const std::string iid = r->target().iid;
    EXPECT_EQ(r->target().url, "http://" + iid + ":8000");
    EXPECT_EQ(Inflight(fleet, iid, "prefill"), 1);
    Fleet::Reservation moved = std::move(*r);
    EXPECT_FALSE(static_cast<bool>(*r));
    moved.Release();
    moved.Release();  // idempotent
    EXPECT_EQ(Inflight(fleet, iid, "prefill"), 0);
  }
  {
    auto a = fleet.PickAndReserve(Phase::kDecode, {});
    auto b = fleet.PickAndReserve(Phase::kDecode, {});
    ASSERT_TRUE(a && b);
    EXPECT_NE(a->target().iid, b->target().iid);  // least loaded first
  }                                               // destructors release
  for (const EngineSnapshot& s : fleet.admin().Snapshot()) {
    EXPECT_EQ(s.inflight_prefill, 0);
    EXPECT_EQ(s.inflight_decode, 0);
  }
  EXPECT_EQ(Inflight(fleet, "d0", "decode"), 0);
  EXPECT_EQ(Inflight(fleet, "d1", "decode"), 0);
}

TEST_F(FleetTest, ExclusionAndAvoidance) {
  Fleet fleet(settings_, clock_, &metrics_);
  EXPECT_FALSE(fleet.PickAndReserve(Phase::kPrefill, {"p0", "p1"}).has_value());
  EXPECT_FALSE(fleet.CanPlace(Phase::kPrefill, {"p0", "p1"}));
  EXPECT_TRUE(fleet.CanPlace(Phase::kDecode, {"p0", "p1"}));
  for (int i = 0; i < 4; ++i) {
    auto r = fleet.PickAndReserve(Phase::kPrefill, {"p0"});
    ASSERT_TRUE(r);
    EXPECT_EQ(r->target().iid, "p1");
    auto d = fleet.PickAndReserve(Phase::kDecode, {}, /*avoid=*/"d1");
    ASSERT_TRUE(d);
    EXPECT_EQ(d->target().iid, "d0");
  }
  auto only = fleet.PickAndReserve(Phase::kDecode, {"d0"}, /*avoid=*/"d1");
  ASSERT_TRUE(only);
  EXPECT_EQ(only->target().iid, "d1");  // the avoided engine when nothing else can
}

TEST_F(FleetTest, EqualEnginesShareTheLoadWhenPhasesAlternate) {
  // One request at a time picks a prefill engine, then a decode engine. Each
  // phase's ties must still rotate over its own engines.
  Fleet fleet(settings_, clock_, &metrics_);
  std::vector<std::string> producers, consumers;
  for (int i = 0; i < 4; ++i) {
    producers.push_back(fleet.PickAndReserve(Phase::kPrefill, {})->target().iid);
    consumers.push_back(fleet.PickAndReserve(Phase::kDecode, {})->target().iid);
  }
  EXPECT_EQ(std::count(producers.begin(), producers.end(), "p0"), 2);
  EXPECT_EQ(std::count(producers.begin(), producers.end(), "p1"), 2);
  EXPECT_EQ(std::count(consumers.begin(), consumers.end(), "d0"), 2);
  EXPECT_EQ(std::count(consumers.begin(), consumers.end(), "d1"), 2);
}

TEST_F(FleetTest, B17_EvidenceGoesToTheEvidenceEngineAndShowsInGauges) {
  Fleet fleet(settings_, clock_, &metrics_);
  engines::EngineFailure f;
  f.phase = engines::Phase::kDecode;
  f.iid = "d0";
  f.evidence_iid = "p1";  // an invalid continuation counts against the producer
  f.breaker_class = BreakerClass::kKvHandoff;
  fleet.control().RecordFailure(f, "p1");
  EXPECT_EQ(nt::MetricValue(registry_, "narwhal_engine_breaker_streak",
                            {{"iid", "p1"}, {"class", "kv_handoff"}}),
            1);
  EXPECT_EQ(nt::MetricValue(registry_, "narwhal_engine_breaker_streak",
                            {{"iid", "d0"}, {"class", "kv_handoff"}}),
            0);
  fleet.control().RecordSuccess("p1", Success::kPrefillHandoff);
  EXPECT_EQ(nt::MetricValue(registry_, "narwhal_engine_breaker_streak",
                            {{"iid", "p1"}, {"class", "kv_handoff"}}),
            0);
  f.breaker_class = BreakerClass::kNone;
  fleet.control().RecordFailure(f, "p1");
  // Every engine exports a zero series for every class.
  for (const char* iid : {"p0", "p1", "d0", "d1"}) {
    for (const char* cls : {"connection", "timeout", "overload", "inference_status", "kv_handoff",
                            "stream", "liveness"}) {
      EXPECT_EQ(nt::MetricValue(registry_, "narwhal_engine_breaker_streak",
                                {{"iid", iid}, {"class", cls}}),
                0)
          << iid << " " << cls;
    }
  }
}

TEST_F(FleetTest, B15_QuarantineGaugeAndReadiness) {
  settings_.recovery.failure_quarantine_s = 5;
  settings_.engines = {Engine("p0", Role::kPrefill), Engine("p1", Role::kPrefill),
                       Engine("d0", Role::kDecode)};
  Fleet fleet(settings_, clock_, &metrics_);
  engines::EngineFailure f;
  f.phase = engines::Phase::kPrefill;
  f.iid = f.evidence_iid = "p0";
  f.breaker_class = BreakerClass::kConnection;
  fleet.control().RecordFailure(f, "");
  EXPECT_EQ(fleet.admin().Snapshot()[0].state, PlacementState::kQuarantined);
  EXPECT_EQ(fleet.admin().Snapshot()[0].hold_kind, HoldKind::kTimed);
  EXPECT_EQ(nt::MetricValue(registry_, "narwhal_engine_quarantined", {{"iid", "p0"}}), 1);
  EXPECT_EQ(nt::MetricValue(registry_, "narwhal_engine_in_placement", {{"iid", "p0"}}), 0);
  std::string why;
  EXPECT_FALSE(fleet.Ready(&why));  // no engine has passed a check yet
  for (const EngineSettings& e : settings_.engines)
    fleet.control().RecordSuccess(e.iid, Success::kHealth);
  EXPECT_TRUE(fleet.Ready(&why)) << why;
  f.iid = f.evidence_iid = "p1";
  fleet.control().RecordFailure(f, "");
  EXPECT_EQ(fleet.admin().Snapshot()[1].state,
            PlacementState::kServing);  // the last prefill engine
  clock_.Advance(5s);
  fleet.admin().PublishAll();
  EXPECT_EQ(fleet.admin().Snapshot()[0].state, PlacementState::kServing);
  EXPECT_EQ(nt::MetricValue(registry_, "narwhal_engine_quarantined", {{"iid", "p0"}}), 0);
  EXPECT_EQ(nt::MetricValue(registry_, "narwhal_engine_in_placement", {{"iid", "p0"}}), 1);
}

TEST_F(FleetTest, ReadyNamesTheMissingRole) {
  settings_.engines = {Engine("p0", Role::kPrefill)};
  Fleet fleet(settings_, clock_, nullptr);
  std::string why;
  EXPECT_FALSE(fleet.Ready(&why));
  EXPECT_EQ(why, "no engine in placement for the decode role");
}

TEST_F(FleetTest, ReadyWaitsForAnEngineOfEachRoleToPassACheck) {
  settings_.engines = {Engine("p0", Role::kPrefill), Engine("d0", Role::kDecode),
                       Engine("d1", Role::kDecode)};
  Fleet fleet(settings_, clock_, nullptr);
  std::string why;
  EXPECT_FALSE(fleet.Ready(&why));
  EXPECT_EQ(why, "no engine of the prefill and decode roles has passed a health check yet");
  EXPECT_FALSE(fleet.control().Checked("p0"));
  fleet.control().RecordSuccess("p0", Success::kHealth);
  EXPECT_TRUE(fleet.control().Checked("p0"));
  EXPECT_FALSE(fleet.Ready(&why));
  EXPECT_EQ(why, "no engine of the decode role has passed a health check yet");
  // An engine that answered a 4xx is alive but has not passed a check.
  fleet.control().RecordSuccess("d0", Success::kEngineRejected);
  EXPECT_FALSE(fleet.Ready(&why));
  // A served leg counts as a check.
  fleet.control().RecordSuccess("d1", Success::kDecodeDone);
  EXPECT_TRUE(fleet.Ready(&why)) << why;
}

TEST(LogSecondsTest, ShortestReadableDuration) {
  EXPECT_EQ(LogSeconds(15), "15s");
  EXPECT_EQ(LogSeconds(0.25), "0.25s");
  EXPECT_EQ(LogSeconds(3600), "3600s");
  EXPECT_EQ(LogSeconds(0.1 + 0.2), "0.3s");
  EXPECT_EQ(LogSeconds(0), "0s");
}

}  // namespace
}  // namespace narwhal::router
