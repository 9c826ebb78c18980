// BreakerBook, the pure breaker state machine (SPEC B15, B17; reference
// behaviour §8, §9): every failure class and its action at
// recovery.eject_after, probe outcomes, backoff, clearing rules, timed
// quarantine, last-engine protection, the stream-evidence cap, whole_wave,
// liveness, readmission evidence and operator actions. Plain MonoTime
// values: no clock, no sleeps, no sockets.
#include "router/fleet/breaker_book.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "engines/api.h"
#include "engines/engine_failure.h"
#include "router/common/settings.h"
#include "tests/fakes/test_engine.h"

namespace narwhal::router {
namespace {

using engines::BreakerClass;
using engines::MonoTime;
using engines::Phase;

constexpr double kInterval = 2.0;  // recovery.readmit_interval_s (exact in binary)
const MonoTime kT0 = MonoTime() + std::chrono::hours(100);

MonoTime At(double s) { return kT0 + engines::FromSeconds(s); }

using ::narwhal::testing::Engine;

// `prefill` engines p0.. and `decode` engines d0.. (disaggregated roles).
std::vector<EngineSettings> Engines(int prefill, int decode) {
  std::vector<EngineSettings> out;
  for (int i = 0; i < prefill; ++i) out.push_back(Engine("p" + std::to_string(i), Role::kPrefill));
  for (int i = 0; i < decode; ++i) out.push_back(Engine("d" + std::to_string(i), Role::kDecode));
  return out;
}

RecoverySettings Recovery() {
  RecoverySettings r;
  r.eject_after = 3;
  r.failure_quarantine_s = 0;
  r.readmit_interval_s = kInterval;
  r.liveness_interval_s = 0;
  r.liveness_misses = 2;
  r.engine_restart_policy = RestartPolicy::kIndividual;
  return r;
}

size_t Idx(const BreakerBook& book, const std::string& iid) {
  const int i = book.Find(iid);
  EXPECT_GE(i, 0) << iid;
  return static_cast<size_t>(i);
}

int Streak(const BreakerBook& book, const std::string& iid, BreakerClass cls) {
  return book.engine(Idx(book, iid)).streak[static_cast<int>(cls)];
}

// `times` failures of class `cls` against `iid` at `now`; all their events.
std::vector<BreakerEvent> Fail(BreakerBook& book, const std::string& iid, BreakerClass cls,
                               int times, MonoTime now, Phase side = Phase::kDecode,
                               const std::string& producer = "p1") {
  std::vector<BreakerEvent> all;
  for (int k = 0; k < times; ++k) {
    for (BreakerEvent& e :
         book.RecordFailure(Idx(book, iid), cls, side, side == Phase::kDecode ? producer : "",
                            "decode engine_error: test failure", now)) {
      all.push_back(std::move(e));
    }
  }
  return all;
}

std::vector<std::string> Kinds(const std::vector<BreakerEvent>& events) {
  std::vector<std::string> out;
  for (const BreakerEvent& e : events) out.push_back(std::string(FleetEventKindName(e.kind)) + "(" + e.iid + ")");
  return out;
}

std::vector<bool> AllIdle(const BreakerBook& book) { return std::vector<bool>(book.size(), true); }

// The probes due at `now` as "iid:kind" strings.
std::vector<std::string> Due(BreakerBook& book, MonoTime now) {
  std::vector<std::string> out;
  for (const ProbeTask& t : book.TakeDueProbes(now, std::vector<bool>(book.size(), false))) {
    out.push_back(book.engine(t.index).settings.iid + ":" + std::string(ProbeKindName(t.kind)));
  }
  return out;
}

using Strings = std::vector<std::string>;

// Puts d0 of a p0,p1,d0,d1 book on an inference hold (stream evidence, the
// transfer produced by p1) at At(1).
void HoldD0(BreakerBook& book) {
  const std::vector<BreakerEvent> events = Fail(book, "d0", BreakerClass::kStream, 3, At(1));
  ASSERT_EQ(Kinds(events), Strings({"engine_hold_started(d0)"}));
  ASSERT_EQ(book.State(Idx(book, "d0"), At(1)), PlacementState::kHeld);
}

// ---------------------------------------------------------------- connection

TEST(BreakerBookTest, ConnectionStreakEjectsAtEjectAfter) {
  BreakerBook book(Engines(2, 2), Recovery());
  const size_t d0 = Idx(book, "d0");
  EXPECT_TRUE(Fail(book, "d0", BreakerClass::kConnection, 2, At(1)).empty());
  EXPECT_EQ(book.State(d0, At(1)), PlacementState::kServing);
  EXPECT_TRUE(book.Eligible(d0, false, At(1)));

  const std::vector<BreakerEvent> events = Fail(book, "d0", BreakerClass::kConnection, 1, At(1));
  ASSERT_EQ(Kinds(events), Strings({"engine_ejected(d0)"}));
  EXPECT_EQ(events[0].cause, "connection");
  EXPECT_EQ(events[0].detail, "decode engine_error: test failure");
  EXPECT_EQ(book.State(d0, At(1)), PlacementState::kEjected);
  EXPECT_FALSE(book.Eligible(d0, false, At(1)));
  ASSERT_TRUE(book.engine(d0).last_ejection_cause.has_value());
  EXPECT_EQ(*book.engine(d0).last_ejection_cause, EjectCause::kConnection);
  EXPECT_FALSE(book.engine(d0).ejection->inference_suspect);
  // More failures of an ejected engine change nothing.
  EXPECT_TRUE(Fail(book, "d0", BreakerClass::kConnection, 3, At(1)).empty());
}

TEST(BreakerBookTest, ConnectionStreakEjectsEvenTheLastEngineOfItsRole) {
  BreakerBook book(Engines(1, 1), Recovery());
  const std::vector<BreakerEvent> events = Fail(book, "d0", BreakerClass::kConnection, 3, At(1));
  ASSERT_EQ(Kinds(events), Strings({"engine_ejected(d0)"}));
  EXPECT_EQ(events[0].cause, "connection");
  EXPECT_EQ(book.EligibleCount(/*prefill=*/false, At(1)), 0);
  EXPECT_EQ(book.EligibleCount(/*prefill=*/true, At(1)), 1);
}

TEST(BreakerBookTest, StreaksAreConsecutiveAndPerClass) {
  BreakerBook book(Engines(2, 2), Recovery());
  const size_t d0 = Idx(book, "d0");
  // Two of each class: no class reaches three.
  for (BreakerClass cls :
       {BreakerClass::kConnection, BreakerClass::kTimeout, BreakerClass::kOverload,
        BreakerClass::kStream, BreakerClass::kInferenceStatus, BreakerClass::kKvHandoff}) {
    EXPECT_TRUE(Fail(book, "d0", cls, 2, At(1)).empty()) << engines::BreakerClassName(cls);
  }
  EXPECT_EQ(book.State(d0, At(1)), PlacementState::kServing);
  EXPECT_TRUE(Due(book, At(1)).empty());
  // A success that clears the connection class breaks its streak.
  book.RecordSuccess(d0, Success::kDecodeDone);
  EXPECT_TRUE(Fail(book, "d0", BreakerClass::kConnection, 2, At(1)).empty());
  EXPECT_EQ(book.State(d0, At(1)), PlacementState::kServing);
  EXPECT_EQ(Kinds(Fail(book, "d0", BreakerClass::kConnection, 1, At(1))),
            Strings({"engine_ejected(d0)"}));
}

TEST(BreakerBookTest, NoEvidenceClassIsIgnored) {
  BreakerBook book(Engines(1, 1), Recovery());
  EXPECT_TRUE(Fail(book, "d0", BreakerClass::kNone, 10, At(1)).empty());
  for (int c = 0; c < engines::kBreakerClassCount; ++c) {
    EXPECT_EQ(book.engine(Idx(book, "d0")).streak[c], 0);
  }
}

// ------------------------------------------------------ timeout / overload

class HealthProbeClassTest : public ::testing::TestWithParam<BreakerClass> {};

TEST_P(HealthProbeClassTest, StreakAsksForAHealthProbe) {
  BreakerBook book(Engines(2, 2), Recovery());
  const size_t d0 = Idx(book, "d0");
  EXPECT_TRUE(Fail(book, "d0", GetParam(), 2, At(1)).empty());
  EXPECT_TRUE(Due(book, At(1)).empty());
  EXPECT_TRUE(Fail(book, "d0", GetParam(), 1, At(1)).empty());  // no hold, no ejection
  EXPECT_EQ(book.State(d0, At(1)), PlacementState::kServing);
  EXPECT_EQ(Due(book, At(1)), Strings({"d0:health"}));
  EXPECT_TRUE(book.engine(d0).probe_running);
  EXPECT_TRUE(Due(book, At(1)).empty());  // one probe at a time
}

TEST_P(HealthProbeClassTest, FailedHealthProbeEjectsACoveredEngine) {
  BreakerBook book(Engines(2, 2), Recovery());
  const size_t d0 = Idx(book, "d0");
  Fail(book, "d0", GetParam(), 3, At(1));
  ASSERT_EQ(Due(book, At(1)), Strings({"d0:health"}));
  const std::vector<BreakerEvent> events = book.CompleteProbe(
      d0, ProbeKind::kHealth, ProbeOutcome::kFailed, "GET /health: HTTP 503", "", At(2));
  ASSERT_EQ(Kinds(events), Strings({"engine_probe(d0)", "engine_ejected(d0)"}));
  EXPECT_EQ(events[0].probe_kind, ProbeKind::kHealth);
  EXPECT_EQ(events[0].outcome, ProbeOutcome::kFailed);
  EXPECT_EQ(events[1].cause, "health_probe");
  EXPECT_EQ(events[1].detail, "GET /health: HTTP 503");
  EXPECT_EQ(book.State(d0, At(2)), PlacementState::kEjected);
  EXPECT_FALSE(book.engine(d0).ejection->inference_suspect);
  // It returns through a health check.
  EXPECT_TRUE(
      Due(book, At(2) + engines::FromSeconds(kInterval) - std::chrono::nanoseconds(1)).empty());
  EXPECT_EQ(Due(book, At(2 + kInterval)), Strings({"d0:health"}));
  const std::vector<BreakerEvent> back = book.CompleteProbe(
      d0, ProbeKind::kHealth, ProbeOutcome::kPassed, "GET /health 200", "", At(5));
  ASSERT_EQ(Kinds(back), Strings({"engine_probe(d0)", "engine_readmitted(d0)"}));
  EXPECT_EQ(back[1].evidence, "health");
  EXPECT_EQ(book.State(d0, At(5)), PlacementState::kServing);
}

TEST_P(HealthProbeClassTest, FailedHealthProbeKeepsTheLastEngineOfItsRole) {
  BreakerBook book(Engines(1, 1), Recovery());
  const size_t d0 = Idx(book, "d0");
  Fail(book, "d0", GetParam(), 3, At(1));
  ASSERT_EQ(Due(book, At(1)), Strings({"d0:health"}));
  const std::vector<BreakerEvent> events =
      book.CompleteProbe(d0, ProbeKind::kHealth, ProbeOutcome::kFailed, "timed out", "", At(2));
  ASSERT_EQ(Kinds(events), Strings({"engine_probe(d0)"}));
  EXPECT_EQ(book.State(d0, At(2)), PlacementState::kServing);
  EXPECT_TRUE(Due(book, At(2)).empty());  // the request for a probe was answered
}

// A passing health probe says the engine answers, not that its legs work:
// it keeps the engine serving but does not clear the streak; a leg that
// succeeds does.
TEST_P(HealthProbeClassTest, PassedHealthProbeKeepsTheEngineButNotClearsItsStreak) {
  BreakerBook book(Engines(2, 2), Recovery());
  const size_t d0 = Idx(book, "d0");
  Fail(book, "d0", GetParam(), 3, At(1));
  ASSERT_EQ(Due(book, At(1)), Strings({"d0:health"}));
  const std::vector<BreakerEvent> events =
      book.CompleteProbe(d0, ProbeKind::kHealth, ProbeOutcome::kPassed, "ok", "", At(2));
  ASSERT_EQ(Kinds(events), Strings({"engine_probe(d0)"}));
  EXPECT_EQ(events[0].outcome, ProbeOutcome::kPassed);
  EXPECT_EQ(Streak(book, "d0", GetParam()), 3);
  EXPECT_TRUE(Due(book, At(2)).empty());
  EXPECT_EQ(book.State(d0, At(2)), PlacementState::kServing);
  book.RecordSuccess(d0, Success::kDecodeDone);
  EXPECT_EQ(Streak(book, "d0", GetParam()), 0);
  // A fresh streak asks for a health probe again.
  Fail(book, "d0", GetParam(), 3, At(3));
  EXPECT_EQ(Due(book, At(3)), Strings({"d0:health"}));
}

// Hardening: an engine whose legs keep failing (dropped after send, 429s)
// while its health checks pass is held for an inference probe at the next
// failure, instead of being health-probed (and kept) forever.
TEST_P(HealthProbeClassTest, FailuresAfterAPassedHealthProbeHoldForAnInferenceProbe) {
  BreakerBook book(Engines(2, 2), Recovery());
  const size_t d0 = Idx(book, "d0");
  Fail(book, "d0", GetParam(), 3, At(1));
  ASSERT_EQ(Due(book, At(1)), Strings({"d0:health"}));
  book.CompleteProbe(d0, ProbeKind::kHealth, ProbeOutcome::kPassed, "ok", "", At(2));
  EXPECT_EQ(Kinds(Fail(book, "d0", GetParam(), 1, At(3))), Strings({"engine_hold_started(d0)"}));
  EXPECT_EQ(book.State(d0, At(3)), PlacementState::kHeld);
  EXPECT_EQ(Due(book, At(3)), Strings({"d0:inference"}));
  // A failed inference probe ejects it as an inference suspect.
  const std::vector<BreakerEvent> out = book.CompleteProbe(
      d0, ProbeKind::kInference, ProbeOutcome::kFailed, "connection lost", "p0", At(4));
  EXPECT_EQ(book.State(d0, At(4)), PlacementState::kEjected);
  EXPECT_TRUE(book.engine(d0).ejection->inference_suspect);
}

INSTANTIATE_TEST_SUITE_P(TimeoutAndOverload, HealthProbeClassTest,
                         ::testing::Values(BreakerClass::kTimeout, BreakerClass::kOverload),
                         [](const auto& info) {
                           return std::string(engines::BreakerClassName(info.param));
                         });

// ------------------------------------ stream / inference_status / kv_handoff

class InferenceClassTest : public ::testing::TestWithParam<BreakerClass> {};

TEST_P(InferenceClassTest, StreakHoldsTheEngineAndProbesAtOnce) {
  BreakerBook book(Engines(2, 2), Recovery());
  const size_t d0 = Idx(book, "d0");
  EXPECT_TRUE(Fail(book, "d0", GetParam(), 2, At(1)).empty());
  EXPECT_EQ(book.State(d0, At(1)), PlacementState::kServing);
  const std::vector<BreakerEvent> events =
      Fail(book, "d0", GetParam(), 1, At(1), Phase::kDecode, "p1");
  ASSERT_EQ(Kinds(events), Strings({"engine_hold_started(d0)"}));
  EXPECT_EQ(events[0].hold_kind, HoldKind::kInference);
  EXPECT_EQ(events[0].cause,
            std::string(engines::BreakerClassName(GetParam())) + " streak reached 3");
  EXPECT_EQ(book.State(d0, At(1)), PlacementState::kHeld);
  EXPECT_FALSE(book.Eligible(d0, false, At(1)));
  EXPECT_EQ(book.EligibleCount(false, At(1)), 1);
  // The inference probe is due at once, and knows the failed transfer.
  EXPECT_EQ(Due(book, At(1)), Strings({"d0:inference"}));
  EXPECT_EQ(book.ProbeSide(d0), Phase::kDecode);
  EXPECT_EQ(book.RecordedProducer(d0), "p1");
  // A hold has no deadline.
  EXPECT_EQ(book.State(d0, At(1e6)), PlacementState::kHeld);
}

TEST_P(InferenceClassTest, PassedInferenceProbeReadmitsWithVerification) {
  BreakerBook book(Engines(2, 2), Recovery());
  const size_t d0 = Idx(book, "d0");
  Fail(book, "d0", GetParam(), 3, At(1));
  ASSERT_EQ(Due(book, At(1)), Strings({"d0:inference"}));
  const std::vector<BreakerEvent> events = book.CompleteProbe(
      d0, ProbeKind::kInference, ProbeOutcome::kPassed, "decoded a handoff from p1", "p1", At(2));
  ASSERT_EQ(Kinds(events),
            Strings({"engine_probe(d0)", "engine_hold_ended(d0)", "engine_readmitted(d0)"}));
  EXPECT_EQ(events[0].probe_kind, ProbeKind::kInference);
  EXPECT_EQ(events[0].outcome, ProbeOutcome::kPassed);
  EXPECT_EQ(events[0].producer, "p1");
  EXPECT_EQ(events[1].hold_kind, HoldKind::kInference);
  EXPECT_EQ(events[1].cause, "verification");
  EXPECT_EQ(events[2].evidence, "verification");
  EXPECT_EQ(book.State(d0, At(2)), PlacementState::kServing);
  EXPECT_EQ(Streak(book, "d0", GetParam()), 0);
  EXPECT_EQ(book.engine(d0).next_probe_at, MonoTime::max());
  EXPECT_TRUE(Due(book, At(100)).empty());
}

TEST_P(InferenceClassTest, FailedInferenceProbeEjectsACoveredEngineAsAnInferenceSuspect) {
  BreakerBook book(Engines(2, 2), Recovery());
  const size_t d0 = Idx(book, "d0");
  Fail(book, "d0", GetParam(), 3, At(1));
  ASSERT_EQ(Due(book, At(1)), Strings({"d0:inference"}));
  const std::vector<BreakerEvent> events = book.CompleteProbe(
      d0, ProbeKind::kInference, ProbeOutcome::kFailed, "no first token within 0.5s", "p1", At(2));
  ASSERT_EQ(Kinds(events),
            Strings({"engine_probe(d0)", "engine_hold_ended(d0)", "engine_ejected(d0)"}));
  EXPECT_EQ(events[0].outcome, ProbeOutcome::kFailed);
  EXPECT_EQ(events[1].cause, "ejected");
  EXPECT_EQ(events[2].cause, "inference_probe");
  EXPECT_EQ(book.State(d0, At(2)), PlacementState::kEjected);
  ASSERT_TRUE(book.engine(d0).ejection.has_value());
  EXPECT_TRUE(book.engine(d0).ejection->inference_suspect);
  EXPECT_EQ(book.engine(d0).ejection->stream_origin, GetParam() == BreakerClass::kStream);
  EXPECT_EQ(book.RecordedProducer(d0), "p1");
  EXPECT_EQ(book.ProbeSide(d0), Phase::kDecode);
  // The next probe, one interval later, is again an inference probe: a
  // health check cannot readmit an inference suspect.
  EXPECT_TRUE(Due(book, At(2 + kInterval) - std::chrono::nanoseconds(1)).empty());
  EXPECT_EQ(Due(book, At(2 + kInterval)), Strings({"d0:inference"}));
  const std::vector<BreakerEvent> back =
      book.CompleteProbe(d0, ProbeKind::kInference, ProbeOutcome::kPassed, "ok", "p1", At(5));
  ASSERT_EQ(Kinds(back), Strings({"engine_probe(d0)", "engine_readmitted(d0)"}));
  EXPECT_EQ(back[1].evidence, "verification");
  EXPECT_EQ(book.State(d0, At(5)), PlacementState::kServing);
  for (int c = 0; c < engines::kBreakerClassCount; ++c) EXPECT_EQ(book.engine(d0).streak[c], 0);
}

TEST_P(InferenceClassTest, FailedInferenceProbeKeepsAnUncoveredEngine) {
  BreakerBook book(Engines(2, 2), Recovery());
  const size_t d0 = Idx(book, "d0");
  Fail(book, "d0", GetParam(), 3, At(1));
  ASSERT_EQ(Due(book, At(1)), Strings({"d0:inference"}));
  // Meanwhile the other decode engine left placement: d0 is uncovered, so
  // its hold ends at once rather than leave the role unserved.
  const std::vector<BreakerEvent> drained = book.Drain(Idx(book, "d1"), At(1));
  ASSERT_EQ(Kinds(drained), Strings({"engine_drained(d1)", "engine_hold_ended(d0)"}));
  EXPECT_EQ(drained[1].hold_kind, HoldKind::kInference);
  EXPECT_EQ(drained[1].cause, "uncovered");
  // The probe that was already running fails: d0 stays in placement.
  const std::vector<BreakerEvent> events = book.CompleteProbe(
      d0, ProbeKind::kInference, ProbeOutcome::kFailed, "no first token", "p1", At(2));
  ASSERT_EQ(Kinds(events), Strings({"engine_probe(d0)"}));
  EXPECT_EQ(book.State(d0, At(2)), PlacementState::kServing);
  EXPECT_TRUE(book.Eligible(d0, false, At(2)));
  EXPECT_TRUE(Due(book, At(100)).empty());
}

TEST_P(InferenceClassTest, InconclusiveProbeReturnsToTheReadmitCadence) {
  BreakerBook book(Engines(2, 2), Recovery());
  const size_t d0 = Idx(book, "d0");
  Fail(book, "d0", GetParam(), 3, At(1));
  ASSERT_EQ(Due(book, At(1)), Strings({"d0:inference"}));
  const std::vector<BreakerEvent> events = book.CompleteProbe(
      d0, ProbeKind::kInference, ProbeOutcome::kInconclusive, "no live consumer", "", At(1.5));
  ASSERT_EQ(Kinds(events), Strings({"engine_probe(d0)"}));
  EXPECT_EQ(events[0].outcome, ProbeOutcome::kInconclusive);
  EXPECT_EQ(book.State(d0, At(1.5)), PlacementState::kHeld);
  EXPECT_EQ(book.engine(d0).probe_failures, 0);
  EXPECT_EQ(book.engine(d0).next_probe_at, At(1.5) + engines::FromSeconds(kInterval));
  EXPECT_TRUE(
      Due(book, At(1.5) + engines::FromSeconds(kInterval) - std::chrono::nanoseconds(1)).empty());
  EXPECT_EQ(Due(book, At(1.5) + engines::FromSeconds(kInterval)), Strings({"d0:inference"}));
}

TEST_P(InferenceClassTest, ProducerFailedIsTreatedAsInconclusive) {
  BreakerBook book(Engines(2, 2), Recovery());
  const size_t d0 = Idx(book, "d0");
  Fail(book, "d0", GetParam(), 3, At(1));
  ASSERT_EQ(Due(book, At(1)), Strings({"d0:inference"}));
  const std::vector<BreakerEvent> events =
      book.CompleteProbe(d0, ProbeKind::kInference, ProbeOutcome::kProducerFailed,
                         "no producer could make a handoff", "", At(1.5));
  ASSERT_EQ(Kinds(events), Strings({"engine_probe(d0)"}));
  EXPECT_EQ(events[0].outcome, ProbeOutcome::kInconclusive);
  EXPECT_EQ(book.State(d0, At(1.5)), PlacementState::kHeld);
  EXPECT_EQ(book.engine(d0).probe_failures, 0);
  EXPECT_EQ(book.engine(d0).next_probe_at, At(1.5) + engines::FromSeconds(kInterval));
}

TEST_P(InferenceClassTest, LastEngineOfItsRoleIsNeverHeld) {
  BreakerBook book(Engines(1, 1), Recovery());
  const size_t d0 = Idx(book, "d0");
  const std::vector<BreakerEvent> events = Fail(book, "d0", GetParam(), 3, At(1));
  ASSERT_EQ(Kinds(events), Strings({"engine_hold_suppressed(d0)"}));
  EXPECT_EQ(events[0].hold_kind, HoldKind::kInference);
  EXPECT_EQ(events[0].cause, "last engine able to serve its role");
  EXPECT_EQ(book.State(d0, At(1)), PlacementState::kServing);
  EXPECT_TRUE(book.Eligible(d0, false, At(1)));
  EXPECT_TRUE(Due(book, At(1)).empty());
}

INSTANTIATE_TEST_SUITE_P(StreamInferenceStatusKvHandoff, InferenceClassTest,
                         ::testing::Values(BreakerClass::kStream, BreakerClass::kInferenceStatus,
                                           BreakerClass::kKvHandoff),
                         [](const auto& info) {
                           return std::string(engines::BreakerClassName(info.param));
                         });

TEST(BreakerBookTest, KvHandoffEvidenceAgainstAProducerHoldsItsPrefillSide) {
  BreakerBook book(Engines(2, 2), Recovery());
  const size_t p0 = Idx(book, "p0");
  const std::vector<BreakerEvent> events =
      Fail(book, "p0", BreakerClass::kKvHandoff, 3, At(1), Phase::kPrefill);
  ASSERT_EQ(Kinds(events), Strings({"engine_hold_started(p0)"}));
  EXPECT_EQ(book.State(p0, At(1)), PlacementState::kHeld);
  EXPECT_FALSE(book.Eligible(p0, true, At(1)));
  EXPECT_EQ(book.ProbeSide(p0), Phase::kPrefill);
  EXPECT_EQ(book.RecordedProducer(p0), "");
  EXPECT_EQ(Due(book, At(1)), Strings({"p0:inference"}));
}

TEST(BreakerBookTest, LastProducerIsNeverHeldOnKvHandoffEvidence) {
  BreakerBook book(Engines(1, 2), Recovery());
  const std::vector<BreakerEvent> events =
      Fail(book, "p0", BreakerClass::kKvHandoff, 3, At(1), Phase::kPrefill);
  ASSERT_EQ(Kinds(events), Strings({"engine_hold_suppressed(p0)"}));
  EXPECT_EQ(book.State(Idx(book, "p0"), At(1)), PlacementState::kServing);
}

// --------------------------------------------------------------- backoff

TEST(BreakerBookTest, FailedReadmissionProbesBackOffUpToTheCap) {
  BreakerBook book(Engines(2, 2), Recovery());
  const size_t d0 = Idx(book, "d0");
  Fail(book, "d0", BreakerClass::kConnection, 3, At(0));
  MonoTime now = At(0) + engines::FromSeconds(kInterval);  // first probe one interval on
  EXPECT_EQ(book.engine(d0).next_probe_at, now);
  for (int failures = 1; failures <= BreakerBook::kMaxProbeBackoff + 3; ++failures) {
    EXPECT_TRUE(Due(book, now - std::chrono::nanoseconds(1)).empty()) << failures;
    ASSERT_EQ(Due(book, now), Strings({"d0:health"})) << failures;
    const std::vector<BreakerEvent> events = book.CompleteProbe(
        d0, ProbeKind::kHealth, ProbeOutcome::kFailed, "connection refused", "", now);
    ASSERT_EQ(Kinds(events), Strings({"engine_probe(d0)"}));
    const int expected = std::min(failures, BreakerBook::kMaxProbeBackoff);
    EXPECT_EQ(book.engine(d0).probe_failures, expected);
    const MonoTime next = now + engines::FromSeconds(kInterval * expected);
    EXPECT_EQ(book.engine(d0).next_probe_at, next) << failures;
    now = next;
  }
  // An inconclusive probe keeps the normal cadence and the failure count.
  ASSERT_EQ(Due(book, now), Strings({"d0:health"}));
  book.CompleteProbe(d0, ProbeKind::kHealth, ProbeOutcome::kInconclusive, "", "", now);
  EXPECT_EQ(book.engine(d0).next_probe_at, now + engines::FromSeconds(kInterval));
  EXPECT_EQ(book.engine(d0).probe_failures, BreakerBook::kMaxProbeBackoff);
  // A readmission resets the backoff.
  now += engines::FromSeconds(kInterval);
  ASSERT_EQ(Due(book, now), Strings({"d0:health"}));
  book.CompleteProbe(d0, ProbeKind::kHealth, ProbeOutcome::kPassed, "", "", now);
  EXPECT_EQ(book.engine(d0).probe_failures, 0);
  EXPECT_EQ(book.engine(d0).next_probe_at, MonoTime::max());
}

TEST(BreakerBookTest, InferenceSuspectProbesBackOffFromTheFirstFailure) {
  BreakerBook book(Engines(2, 2), Recovery());
  const size_t d0 = Idx(book, "d0");
  HoldD0(book);
  ASSERT_EQ(Due(book, At(1)), Strings({"d0:inference"}));
  book.CompleteProbe(d0, ProbeKind::kInference, ProbeOutcome::kFailed, "silent", "p1", At(1));
  EXPECT_EQ(book.engine(d0).probe_failures, 1);
  MonoTime now = At(1) + engines::FromSeconds(kInterval);
  EXPECT_EQ(book.engine(d0).next_probe_at, now);
  for (int failures = 2; failures <= 4; ++failures) {
    ASSERT_EQ(Due(book, now), Strings({"d0:inference"}));
    book.CompleteProbe(d0, ProbeKind::kInference, ProbeOutcome::kFailed, "silent", "p1", now);
    EXPECT_EQ(book.engine(d0).next_probe_at, now + engines::FromSeconds(kInterval * failures));
    now += engines::FromSeconds(kInterval * failures);
  }
}

// --------------------------------------------------------- clearing rules

TEST(BreakerBookTest, EachSuccessClearsExactlyItsClasses) {
  struct Row {
    Success success;
    std::vector<BreakerClass> clears;
  };
  const std::vector<Row> table = {
      {Success::kEngineRejected, {BreakerClass::kConnection, BreakerClass::kInferenceStatus}},
      // A health check never clears the evidence of inference legs.
      {Success::kHealth, {BreakerClass::kLiveness}},
      {Success::kLiveness, {BreakerClass::kLiveness}},
      {Success::kPrefillHandoff,
       {BreakerClass::kConnection, BreakerClass::kTimeout, BreakerClass::kOverload,
        BreakerClass::kInferenceStatus, BreakerClass::kKvHandoff}},
      {Success::kDecodeDone,
       {BreakerClass::kConnection, BreakerClass::kTimeout, BreakerClass::kOverload,
        BreakerClass::kInferenceStatus, BreakerClass::kStream}},
  };
  RecoverySettings recovery = Recovery();
  recovery.eject_after = 100;  // evidence only, no action
  for (const Row& row : table) {
    BreakerBook book(Engines(1, 1), recovery);
    const size_t d0 = Idx(book, "d0");
    for (int c = 1; c < engines::kBreakerClassCount; ++c) {
      Fail(book, "d0", static_cast<BreakerClass>(c), 2, At(1));
    }
    book.RecordSuccess(d0, row.success);
    for (int c = 1; c < engines::kBreakerClassCount; ++c) {
      const BreakerClass cls = static_cast<BreakerClass>(c);
      const bool cleared = std::find(row.clears.begin(), row.clears.end(), cls) != row.clears.end();
      EXPECT_EQ(book.engine(d0).streak[c], cleared ? 0 : 2)
          << "success " << static_cast<int>(row.success) << ", class "
          << engines::BreakerClassName(cls);
    }
  }
}

// ------------------------------------------------------------ quarantine

TEST(BreakerBookTest, QuarantineExcludesAFailedEngineUntilItExpires) {
  RecoverySettings recovery = Recovery();
  recovery.failure_quarantine_s = 3;
  BreakerBook book(Engines(2, 2), recovery);
  const size_t d0 = Idx(book, "d0");
  const std::vector<BreakerEvent> events = Fail(book, "d0", BreakerClass::kTimeout, 1, At(1));
  ASSERT_EQ(Kinds(events), Strings({"engine_hold_started(d0)"}));
  EXPECT_EQ(events[0].hold_kind, HoldKind::kTimed);
  EXPECT_EQ(events[0].cause, "decode engine_error: test failure");
  EXPECT_EQ(book.State(d0, At(1)), PlacementState::kQuarantined);
  EXPECT_FALSE(book.Eligible(d0, false, At(3.9)));
  EXPECT_TRUE(book.ExpireQuarantines(At(3.9)).empty());
  EXPECT_EQ(book.State(d0, At(3.9)), PlacementState::kQuarantined);
  // At the deadline it is back, and ExpireQuarantines reports the end.
  EXPECT_EQ(book.State(d0, At(4)), PlacementState::kServing);
  const std::vector<BreakerEvent> ended = book.ExpireQuarantines(At(4));
  ASSERT_EQ(Kinds(ended), Strings({"engine_hold_ended(d0)"}));
  EXPECT_EQ(ended[0].hold_kind, HoldKind::kTimed);
  EXPECT_EQ(ended[0].cause, "expired");
  EXPECT_FALSE(book.engine(d0).quarantine.has_value());
  EXPECT_TRUE(book.ExpireQuarantines(At(5)).empty());
  EXPECT_TRUE(book.Eligible(d0, false, At(4)));
}

TEST(BreakerBookTest, QuarantineNeverTakesTheLastEngineOfARole) {
  RecoverySettings recovery = Recovery();
  recovery.failure_quarantine_s = 3;
  {
    BreakerBook book(Engines(1, 1), recovery);
    EXPECT_TRUE(Fail(book, "d0", BreakerClass::kStream, 1, At(1)).empty());
    EXPECT_EQ(book.State(Idx(book, "d0"), At(1)), PlacementState::kServing);
  }
  {
    BreakerBook book(Engines(2, 2), recovery);
    ASSERT_EQ(Kinds(Fail(book, "d1", BreakerClass::kStream, 1, At(1))),
              Strings({"engine_hold_started(d1)"}));
    // d1 is out: d0 is now the last decode engine.
    EXPECT_TRUE(Fail(book, "d0", BreakerClass::kStream, 1, At(1)).empty());
    EXPECT_EQ(book.State(Idx(book, "d0"), At(1)), PlacementState::kServing);
  }
}

TEST(BreakerBookTest, QuarantineIsNotForNoEvidenceFailures) {
  RecoverySettings recovery = Recovery();
  recovery.failure_quarantine_s = 3;
  BreakerBook book(Engines(2, 2), recovery);
  EXPECT_TRUE(Fail(book, "d0", BreakerClass::kNone, 1, At(1)).empty());
  EXPECT_EQ(book.State(Idx(book, "d0"), At(1)), PlacementState::kServing);
}

TEST(BreakerBookTest, InferenceHoldSupersedesAQuarantine) {
  RecoverySettings recovery = Recovery();
  recovery.failure_quarantine_s = 30;
  BreakerBook book(Engines(2, 2), recovery);
  const size_t d0 = Idx(book, "d0");
  ASSERT_EQ(Kinds(Fail(book, "d0", BreakerClass::kStream, 1, At(1))),
            Strings({"engine_hold_started(d0)"}));
  ASSERT_EQ(book.State(d0, At(1)), PlacementState::kQuarantined);
  // Legs already in flight fail too and complete the streak.
  EXPECT_TRUE(Fail(book, "d0", BreakerClass::kStream, 1, At(2)).empty());
  const std::vector<BreakerEvent> events = Fail(book, "d0", BreakerClass::kStream, 1, At(2));
  ASSERT_EQ(Kinds(events), Strings({"engine_hold_ended(d0)", "engine_hold_started(d0)"}));
  EXPECT_EQ(events[0].hold_kind, HoldKind::kTimed);
  EXPECT_EQ(events[0].cause, "superseded");
  EXPECT_EQ(events[1].hold_kind, HoldKind::kInference);
  EXPECT_FALSE(book.engine(d0).quarantine.has_value());
  // Past the quarantine's deadline it is still held: only a probe ends it.
  EXPECT_EQ(book.State(d0, At(100)), PlacementState::kHeld);
  EXPECT_TRUE(book.ExpireQuarantines(At(100)).empty());
}

// ------------------------------------------------- stream-evidence cap

TEST(BreakerBookTest, StreamEvidenceHoldsOnlyOneOfTwoDecodeEngines) {
  BreakerBook book(Engines(2, 2), Recovery());
  HoldD0(book);
  const std::vector<BreakerEvent> events = Fail(book, "d1", BreakerClass::kStream, 3, At(2));
  ASSERT_EQ(Kinds(events), Strings({"engine_hold_suppressed(d1)"}));
  EXPECT_EQ(book.State(Idx(book, "d1"), At(2)), PlacementState::kServing);
  EXPECT_EQ(book.EligibleCount(false, At(2)), 1);
}

TEST(BreakerBookTest, StreamEvidenceHoldsAtMostHalfOfFourDecodeEngines) {
  BreakerBook book(Engines(2, 4), Recovery());
  HoldD0(book);
  ASSERT_EQ(Kinds(Fail(book, "d1", BreakerClass::kStream, 3, At(1))),
            Strings({"engine_hold_started(d1)"}));
  const std::vector<BreakerEvent> events = Fail(book, "d2", BreakerClass::kStream, 3, At(1));
  ASSERT_EQ(Kinds(events), Strings({"engine_hold_suppressed(d2)"}));
  EXPECT_EQ(events[0].cause, "stream evidence already holds out half of the role's engines");
  EXPECT_EQ(book.State(Idx(book, "d2"), At(1)), PlacementState::kServing);
  EXPECT_EQ(book.EligibleCount(false, At(1)), 2);

  // An engine ejected after a failed probe on stream evidence still counts.
  ASSERT_EQ(Due(book, At(1)), Strings({"d0:inference", "d1:inference"}));
  book.CompleteProbe(Idx(book, "d0"), ProbeKind::kInference, ProbeOutcome::kFailed, "silent", "p1",
                     At(2));
  ASSERT_EQ(book.State(Idx(book, "d0"), At(2)), PlacementState::kEjected);
  EXPECT_EQ(Kinds(Fail(book, "d2", BreakerClass::kStream, 1, At(2))),
            Strings({"engine_hold_suppressed(d2)"}));
  EXPECT_EQ(Kinds(Fail(book, "d3", BreakerClass::kStream, 3, At(2))),
            Strings({"engine_hold_suppressed(d3)"}));

  // The cap is about stream evidence alone: another class still holds.
  EXPECT_EQ(Kinds(Fail(book, "d2", BreakerClass::kInferenceStatus, 3, At(2))),
            Strings({"engine_hold_started(d2)"}));
}

TEST(BreakerBookTest, StreamEvidenceHoldsOnlyOneOfThreeDecodeEngines) {
  BreakerBook book(Engines(2, 3), Recovery());
  HoldD0(book);
  EXPECT_EQ(Kinds(Fail(book, "d1", BreakerClass::kStream, 3, At(2))),
            Strings({"engine_hold_suppressed(d1)"}));
}

// ------------------------------------------------------------- whole_wave

TEST(BreakerBookTest, WholeWaveEjectionHoldsEveryEngineUntilReadmission) {
  RecoverySettings recovery = Recovery();
  recovery.engine_restart_policy = RestartPolicy::kWholeWave;
  BreakerBook book(Engines(2, 2), recovery);
  EXPECT_EQ(book.WaveHoldReason(), "");
  Fail(book, "d1", BreakerClass::kConnection, 3, At(1));
  EXPECT_EQ(book.WaveHoldReason(), "whole-wave hold: engine d1 is ejected (connection)");
  for (size_t i = 0; i < book.size(); ++i) {
    EXPECT_FALSE(book.Eligible(i, true, At(1)));
    EXPECT_FALSE(book.Eligible(i, false, At(1)));
  }
  EXPECT_EQ(book.EligibleCount(true, At(1)), 0);
  EXPECT_EQ(book.EligibleCount(false, At(1)), 0);
  // Each engine's own state is unchanged; only placement is held.
  EXPECT_EQ(book.State(Idx(book, "p0"), At(1)), PlacementState::kServing);

  ASSERT_EQ(Due(book, At(1 + kInterval)), Strings({"d1:health"}));
  const std::vector<BreakerEvent> events = book.CompleteProbe(
      Idx(book, "d1"), ProbeKind::kHealth, ProbeOutcome::kPassed, "ok", "", At(4));
  ASSERT_EQ(Kinds(events), Strings({"engine_probe(d1)", "engine_readmitted(d1)"}));
  EXPECT_EQ(book.WaveHoldReason(), "");
  EXPECT_EQ(book.EligibleCount(true, At(4)), 2);
  EXPECT_EQ(book.EligibleCount(false, At(4)), 2);
}

TEST(BreakerBookTest, IndividualPolicyEjectionHoldsOnlyThatEngine) {
  BreakerBook book(Engines(2, 2), Recovery());
  Fail(book, "d1", BreakerClass::kConnection, 3, At(1));
  EXPECT_EQ(book.WaveHoldReason(), "");
  EXPECT_EQ(book.EligibleCount(true, At(1)), 2);
  EXPECT_EQ(book.EligibleCount(false, At(1)), 1);
}

// --------------------------------------------------------------- liveness

RecoverySettings LivenessRecovery() {
  RecoverySettings r = Recovery();
  r.liveness_interval_s = 10;
  r.liveness_misses = 2;
  return r;
}

TEST(BreakerBookTest, LivenessSweepsOnlyIdleEnginesAtTheInterval) {
  BreakerBook book(Engines(1, 2), LivenessRecovery());
  std::vector<bool> idle = {true, false, true};  // d0 has a leg in flight
  std::vector<std::string> due;
  for (const ProbeTask& t : book.TakeDueProbes(At(0), idle)) {
    EXPECT_EQ(t.kind, ProbeKind::kLiveness);
    due.push_back(book.engine(t.index).settings.iid);
  }
  EXPECT_EQ(due, Strings({"p0", "d1"}));
  for (const char* iid : {"p0", "d1"}) {
    book.CompleteProbe(Idx(book, iid), ProbeKind::kLiveness, ProbeOutcome::kPassed, "", "",
                       At(0.1));
  }
  EXPECT_TRUE(book.TakeDueProbes(At(9.9), AllIdle(book)).size() == 1);  // d0, never swept yet
  book.CompleteProbe(Idx(book, "d0"), ProbeKind::kLiveness, ProbeOutcome::kPassed, "", "", At(9.9));
  EXPECT_TRUE(book.TakeDueProbes(At(9.95), AllIdle(book)).empty());
  EXPECT_EQ(book.TakeDueProbes(At(10), AllIdle(book)).size(), 2u);  // p0 and d1 again
}

TEST(BreakerBookTest, LivenessMissesEjectAtTheLimitEvenTheLastEngine) {
  BreakerBook book(Engines(1, 1), LivenessRecovery());
  const size_t d0 = Idx(book, "d0");
  book.TakeDueProbes(At(0), AllIdle(book));
  std::vector<BreakerEvent> events =
      book.CompleteProbe(d0, ProbeKind::kLiveness, ProbeOutcome::kFailed, "refused", "", At(0));
  ASSERT_EQ(Kinds(events), Strings({"engine_probe(d0)"}));
  EXPECT_EQ(events[0].probe_kind, ProbeKind::kLiveness);
  EXPECT_EQ(book.engine(d0).liveness_misses, 1);
  EXPECT_EQ(Streak(book, "d0", BreakerClass::kLiveness), 1);
  EXPECT_EQ(book.State(d0, At(0)), PlacementState::kServing);

  book.TakeDueProbes(At(10), AllIdle(book));
  events =
      book.CompleteProbe(d0, ProbeKind::kLiveness, ProbeOutcome::kFailed, "refused", "", At(10));
  ASSERT_EQ(Kinds(events), Strings({"engine_probe(d0)", "engine_ejected(d0)"}));
  EXPECT_EQ(events[1].cause, "liveness");
  EXPECT_EQ(events[1].detail, "2 consecutive failed health checks: refused");
  EXPECT_EQ(book.State(d0, At(10)), PlacementState::kEjected);
  // An ejected engine gets readmission probes, not liveness sweeps.
  EXPECT_EQ(Due(book, At(10 + kInterval)), Strings({"d0:health"}));
}

TEST(BreakerBookTest, InconclusiveLivenessSweepIsNoMiss) {
  BreakerBook book(Engines(1, 1), LivenessRecovery());
  const size_t d0 = Idx(book, "d0");
  book.TakeDueProbes(At(0), AllIdle(book));
  book.CompleteProbe(d0, ProbeKind::kLiveness, ProbeOutcome::kInconclusive, "", "", At(0));
  EXPECT_EQ(book.engine(d0).liveness_misses, 0);
}

TEST(BreakerBookTest, LivenessSuccessResetsMissesAndEndsAQuarantine) {
  RecoverySettings recovery = LivenessRecovery();
  recovery.failure_quarantine_s = 30;
  BreakerBook book(Engines(2, 2), recovery);
  const size_t d0 = Idx(book, "d0");
  book.TakeDueProbes(At(0), AllIdle(book));
  for (size_t i = 0; i < book.size(); ++i) {
    book.CompleteProbe(i, ProbeKind::kLiveness,
                       i == d0 ? ProbeOutcome::kFailed : ProbeOutcome::kPassed, "", "", At(0));
  }
  ASSERT_EQ(book.engine(d0).liveness_misses, 1);
  // Timeout evidence: a health 200 is an answer to it.
  ASSERT_EQ(Kinds(Fail(book, "d0", BreakerClass::kTimeout, 1, At(5))),
            Strings({"engine_hold_started(d0)"}));
  ASSERT_EQ(book.State(d0, At(5)), PlacementState::kQuarantined);

  book.TakeDueProbes(At(10), AllIdle(book));
  const std::vector<BreakerEvent> events =
      book.CompleteProbe(d0, ProbeKind::kLiveness, ProbeOutcome::kPassed, "", "", At(10));
  ASSERT_EQ(Kinds(events), Strings({"engine_probe(d0)", "engine_hold_ended(d0)"}));
  EXPECT_EQ(events[1].hold_kind, HoldKind::kTimed);
  EXPECT_EQ(events[1].cause, "health");
  EXPECT_EQ(book.State(d0, At(10)), PlacementState::kServing);
  EXPECT_EQ(book.engine(d0).liveness_misses, 0);
  EXPECT_EQ(Streak(book, "d0", BreakerClass::kLiveness), 0);
  // One more miss is again the first.
  book.TakeDueProbes(At(20), AllIdle(book));
  EXPECT_EQ(
      Kinds(book.CompleteProbe(d0, ProbeKind::kLiveness, ProbeOutcome::kFailed, "", "", At(20))),
      Strings({"engine_probe(d0)"}));
  EXPECT_EQ(book.State(d0, At(20)), PlacementState::kServing);
}

TEST(BreakerBookTest, B15_StreamQuarantineOutlastsAHealthySweepAndEndsOnlyByVerification) {
  RecoverySettings recovery = LivenessRecovery();
  recovery.failure_quarantine_s = 30;
  BreakerBook book(Engines(2, 2), recovery);
  const size_t d0 = Idx(book, "d0");
  ASSERT_EQ(Kinds(Fail(book, "d0", BreakerClass::kStream, 1, At(5), Phase::kDecode, "p1")),
            Strings({"engine_hold_started(d0)"}));
  ASSERT_TRUE(book.StreamQuarantined(d0, At(5)));
  // What a verification exercises: the failed leg's side and producer.
  EXPECT_EQ(book.ProbeSide(d0), Phase::kDecode);
  EXPECT_EQ(book.RecordedProducer(d0), "p1");

  // A health 200 (a sweep started before the failure) does not end it.
  EXPECT_EQ(
      Kinds(book.CompleteProbe(d0, ProbeKind::kLiveness, ProbeOutcome::kPassed, "", "", At(6))),
      Strings({"engine_probe(d0)"}));
  EXPECT_EQ(book.State(d0, At(6)), PlacementState::kQuarantined);

  // Its sweep is an inference verification; the others' stay health checks.
  std::vector<ProbeTask> tasks = book.TakeDueProbes(At(10), AllIdle(book));
  ASSERT_EQ(tasks.size(), 4u);
  for (const ProbeTask& t : tasks) {
    EXPECT_EQ(t.kind, t.index == d0 ? ProbeKind::kInference : ProbeKind::kLiveness) << t.index;
    if (t.index != d0) book.CompleteProbe(t.index, t.kind, ProbeOutcome::kPassed, "", "", At(10));
  }
  // A failed verification changes nothing: no ejection, no miss, still out.
  EXPECT_EQ(Kinds(book.CompleteProbe(d0, ProbeKind::kInference, ProbeOutcome::kFailed,
                                     "no first token within 0.75s", "p1", At(10))),
            Strings({"engine_probe(d0)"}));
  EXPECT_EQ(book.State(d0, At(10)), PlacementState::kQuarantined);
  EXPECT_EQ(book.engine(d0).liveness_misses, 0);

  // The next sweep verifies again; a pass ends the quarantine early.
  tasks = book.TakeDueProbes(At(20), AllIdle(book));
  ASSERT_EQ(tasks.size(), 4u);
  for (const ProbeTask& t : tasks) {
    if (t.index != d0) book.CompleteProbe(t.index, t.kind, ProbeOutcome::kPassed, "", "", At(20));
  }
  const std::vector<BreakerEvent> events = book.CompleteProbe(
      d0, ProbeKind::kInference, ProbeOutcome::kPassed, "decoded a handoff from p1", "p1", At(20));
  ASSERT_EQ(Kinds(events), Strings({"engine_probe(d0)", "engine_hold_ended(d0)"}));
  EXPECT_EQ(events[1].hold_kind, HoldKind::kTimed);
  EXPECT_EQ(events[1].cause, "verification");
  EXPECT_EQ(book.State(d0, At(20)), PlacementState::kServing);
  EXPECT_EQ(Streak(book, "d0", BreakerClass::kStream), 0);
  EXPECT_FALSE(book.StreamQuarantined(d0, At(20)));
}

TEST(BreakerBookTest, StreamEvidenceDuringATimeoutQuarantineAlsoNeedsAVerification) {
  RecoverySettings recovery = LivenessRecovery();
  recovery.failure_quarantine_s = 30;
  BreakerBook book(Engines(2, 2), recovery);
  const size_t d0 = Idx(book, "d0");
  ASSERT_EQ(Kinds(Fail(book, "d0", BreakerClass::kTimeout, 1, At(5))),
            Strings({"engine_hold_started(d0)"}));
  EXPECT_FALSE(book.StreamQuarantined(d0, At(5)));
  // A leg still in flight then goes silent.
  EXPECT_TRUE(Fail(book, "d0", BreakerClass::kStream, 1, At(6)).empty());
  EXPECT_TRUE(book.StreamQuarantined(d0, At(6)));
  EXPECT_EQ(
      Kinds(book.CompleteProbe(d0, ProbeKind::kLiveness, ProbeOutcome::kPassed, "", "", At(7))),
      Strings({"engine_probe(d0)"}));
  EXPECT_EQ(book.State(d0, At(7)), PlacementState::kQuarantined);
  // It still expires on time.
  EXPECT_EQ(Kinds(book.ExpireQuarantines(At(35))), Strings({"engine_hold_ended(d0)"}));
  EXPECT_EQ(book.State(d0, At(35)), PlacementState::kServing);
}

TEST(BreakerBookTest, StreamQuarantineWithoutLivenessSweepsRunsItsFullTime) {
  RecoverySettings recovery = Recovery();  // liveness_interval_s 0
  recovery.failure_quarantine_s = 30;
  BreakerBook book(Engines(2, 2), recovery);
  const size_t d0 = Idx(book, "d0");
  Fail(book, "d0", BreakerClass::kStream, 1, At(5));
  EXPECT_TRUE(book.TakeDueProbes(At(20), AllIdle(book)).empty());
  EXPECT_EQ(book.State(d0, At(34.9)), PlacementState::kQuarantined);
  EXPECT_EQ(book.State(d0, At(35)), PlacementState::kServing);
}

// ------------------------------------------------------ readmission evidence

TEST(BreakerBookTest, ConnectionEjectionReturnsOnAHealthCheck) {
  BreakerBook book(Engines(2, 2), Recovery());
  const size_t d0 = Idx(book, "d0");
  Fail(book, "d0", BreakerClass::kConnection, 3, At(1));
  Fail(book, "d0", BreakerClass::kTimeout, 2, At(1));
  ASSERT_EQ(Due(book, At(1 + kInterval)), Strings({"d0:health"}));
  const std::vector<BreakerEvent> events = book.CompleteProbe(
      d0, ProbeKind::kHealth, ProbeOutcome::kPassed, "GET /health 200", "", At(4));
  ASSERT_EQ(Kinds(events), Strings({"engine_probe(d0)", "engine_readmitted(d0)"}));
  EXPECT_EQ(events[1].evidence, "health");
  EXPECT_EQ(book.State(d0, At(4)), PlacementState::kServing);
  for (int c = 0; c < engines::kBreakerClassCount; ++c) EXPECT_EQ(book.engine(d0).streak[c], 0);
  EXPECT_TRUE(book.engine(d0).last_ejection_cause.has_value());  // history is kept
}

// Hardening: an engine readmitted on a health check alone that fails again
// before any leg succeeds (it answers /health but drops every inference
// connection) returns next time only through an inference probe.
TEST(BreakerBookTest, ConnectionEjectionAgainAfterAHealthReadmissionNeedsAnInferenceProbe) {
  BreakerBook book(Engines(2, 2), Recovery());
  const size_t d0 = Idx(book, "d0");
  Fail(book, "d0", BreakerClass::kConnection, 3, At(1));
  ASSERT_EQ(Due(book, At(1 + kInterval)), Strings({"d0:health"}));
  book.CompleteProbe(d0, ProbeKind::kHealth, ProbeOutcome::kPassed, "ok", "", At(4));
  ASSERT_EQ(book.State(d0, At(4)), PlacementState::kServing);
  Fail(book, "d0", BreakerClass::kConnection, 3, At(5));
  ASSERT_EQ(book.State(d0, At(5)), PlacementState::kEjected);
  EXPECT_TRUE(book.engine(d0).ejection->inference_suspect);
  EXPECT_EQ(Due(book, At(5 + kInterval)), Strings({"d0:inference"}));
  // One that served a leg in between is ejected as an ordinary connection
  // failure again.
  BreakerBook other(Engines(2, 2), Recovery());
  Fail(other, "d0", BreakerClass::kConnection, 3, At(1));
  ASSERT_EQ(Due(other, At(1 + kInterval)), Strings({"d0:health"}));
  other.CompleteProbe(d0, ProbeKind::kHealth, ProbeOutcome::kPassed, "ok", "", At(4));
  other.RecordSuccess(d0, Success::kDecodeDone);
  Fail(other, "d0", BreakerClass::kConnection, 3, At(5));
  EXPECT_FALSE(other.engine(d0).ejection->inference_suspect);
}

TEST(BreakerBookTest, PinnedContractReadmissionsReportLifecycleEvidence) {
  BreakerBook book(Engines(2, 2), Recovery(), /*contract_pinned=*/true);
  // An inference hold ended by a passed (and lifecycle-validated) probe.
  HoldD0(book);
  ASSERT_EQ(Due(book, At(1)), Strings({"d0:inference"}));
  std::vector<BreakerEvent> events = book.CompleteProbe(Idx(book, "d0"), ProbeKind::kInference,
                                                        ProbeOutcome::kPassed, "", "p1", At(2));
  ASSERT_EQ(Kinds(events),
            Strings({"engine_probe(d0)", "engine_hold_ended(d0)", "engine_readmitted(d0)"}));
  EXPECT_EQ(events[1].cause, "lifecycle");
  EXPECT_EQ(events[2].evidence, "lifecycle");
  // A connection ejection readmitted by a health + lifecycle check.
  Fail(book, "d1", BreakerClass::kConnection, 3, At(3));
  ASSERT_EQ(Due(book, At(3 + kInterval)), Strings({"d1:health"}));
  events =
      book.CompleteProbe(Idx(book, "d1"), ProbeKind::kHealth, ProbeOutcome::kPassed, "", "", At(6));
  ASSERT_EQ(Kinds(events), Strings({"engine_probe(d1)", "engine_readmitted(d1)"}));
  EXPECT_EQ(events[1].evidence, "lifecycle");
}

TEST(BreakerBookTest, HeldEngineEjectedMeanwhileStaysAnInferenceSuspect) {
  BreakerBook book(Engines(2, 2), Recovery());
  const size_t d0 = Idx(book, "d0");
  HoldD0(book);
  const std::vector<BreakerEvent> events = Fail(book, "d0", BreakerClass::kConnection, 3, At(2));
  ASSERT_EQ(Kinds(events), Strings({"engine_hold_ended(d0)", "engine_ejected(d0)"}));
  EXPECT_EQ(events[0].cause, "ejected");
  EXPECT_EQ(events[1].cause, "connection");
  ASSERT_TRUE(book.engine(d0).ejection.has_value());
  EXPECT_TRUE(book.engine(d0).ejection->inference_suspect);
  EXPECT_EQ(book.RecordedProducer(d0), "p1");
  // A health check alone does not bring it back.
  EXPECT_EQ(Due(book, At(2 + kInterval)), Strings({"d0:inference"}));
}

TEST(BreakerBookTest, EjectionThatUncoversAHeldEngineEndsItsHold) {
  BreakerBook book(Engines(2, 2), Recovery());
  HoldD0(book);
  const std::vector<BreakerEvent> events = Fail(book, "d1", BreakerClass::kConnection, 3, At(2));
  ASSERT_EQ(Kinds(events), Strings({"engine_ejected(d1)", "engine_hold_ended(d0)"}));
  EXPECT_EQ(events[1].hold_kind, HoldKind::kInference);
  EXPECT_EQ(events[1].cause, "uncovered");
  EXPECT_EQ(book.State(Idx(book, "d0"), At(2)), PlacementState::kServing);
  EXPECT_EQ(book.EligibleCount(false, At(2)), 1);
  EXPECT_TRUE(Due(book, At(2)).empty());
}

TEST(BreakerBookTest, EjectionThatUncoversAQuarantinedEngineEndsTheQuarantine) {
  RecoverySettings recovery = Recovery();
  recovery.failure_quarantine_s = 30;
  BreakerBook book(Engines(2, 2), recovery);
  ASSERT_EQ(Kinds(Fail(book, "d0", BreakerClass::kStream, 1, At(1))),
            Strings({"engine_hold_started(d0)"}));
  const std::vector<BreakerEvent> events = Fail(book, "d1", BreakerClass::kConnection, 3, At(2));
  ASSERT_EQ(Kinds(events), Strings({"engine_ejected(d1)", "engine_hold_ended(d0)"}));
  EXPECT_EQ(events[1].hold_kind, HoldKind::kTimed);
  EXPECT_EQ(events[1].cause, "uncovered");
  EXPECT_EQ(book.State(Idx(book, "d0"), At(2)), PlacementState::kServing);
}

// --------------------------------------------------------------- operators

TEST(BreakerBookTest, OperatorEjectionIsNeverUndoneByAProbe) {
  BreakerBook book(Engines(2, 2), Recovery());
  const size_t d0 = Idx(book, "d0");
  book.Eject(d0, EjectCause::kOperator, "GPU maintenance", At(1));
  // Long after the readmit interval nothing is probed: only the operator
  // brings it back.
  EXPECT_TRUE(Due(book, At(1000)).empty());
  EXPECT_EQ(book.State(d0, At(1000)), PlacementState::kEjected);
  // A breaker ejection of the same engine, by contrast, is probed.
  const size_t d1 = Idx(book, "d1");
  book.Eject(d1, EjectCause::kConnection, "refused", At(1));
  EXPECT_EQ(Due(book, At(1000)), Strings({"d1:health"}));
}

TEST(BreakerBookTest, OperatorEjectAndReadmit) {
  BreakerBook book(Engines(1, 1), Recovery());
  const size_t d0 = Idx(book, "d0");
  std::vector<BreakerEvent> events = book.Eject(d0, EjectCause::kOperator, "ECC errors", At(1));
  ASSERT_EQ(Kinds(events), Strings({"engine_ejected(d0)"}));
  EXPECT_EQ(events[0].cause, "operator");
  EXPECT_EQ(events[0].detail, "ECC errors");
  EXPECT_EQ(book.State(d0, At(1)), PlacementState::kEjected);  // even the last engine
  EXPECT_TRUE(book.Eject(d0, EjectCause::kOperator, "again", At(1)).empty());
  events = book.Readmit(d0, "operator", At(2));
  ASSERT_EQ(Kinds(events), Strings({"engine_readmitted(d0)"}));
  EXPECT_EQ(events[0].evidence, "operator");
  EXPECT_EQ(book.State(d0, At(2)), PlacementState::kServing);
  EXPECT_TRUE(book.Readmit(d0, "operator", At(2)).empty());  // nothing to readmit
}

TEST(BreakerBookTest, OperatorReadmitEndsAHold) {
  BreakerBook book(Engines(2, 2), Recovery());
  HoldD0(book);
  const std::vector<BreakerEvent> events = book.Readmit(Idx(book, "d0"), "verification", At(2));
  ASSERT_EQ(Kinds(events), Strings({"engine_hold_ended(d0)", "engine_readmitted(d0)"}));
  EXPECT_EQ(events[0].cause, "verification");
  EXPECT_EQ(book.State(Idx(book, "d0"), At(2)), PlacementState::kServing);
  EXPECT_TRUE(Due(book, At(100)).empty());
}

TEST(BreakerBookTest, DrainedEngineLeavesPlacementUntilReadmittedAndIsNotProbed) {
  BreakerBook book(Engines(2, 2), Recovery());
  const size_t d0 = Idx(book, "d0");
  std::vector<BreakerEvent> events = book.Drain(d0, At(1));
  ASSERT_EQ(Kinds(events), Strings({"engine_drained(d0)"}));
  EXPECT_TRUE(book.Drain(d0, At(1)).empty());
  EXPECT_EQ(book.State(d0, At(1)), PlacementState::kDraining);
  EXPECT_FALSE(book.Eligible(d0, false, At(1)));
  // Ejected while drained: no probe brings it back behind the operator.
  Fail(book, "d0", BreakerClass::kConnection, 3, At(1));
  EXPECT_TRUE(Due(book, At(1000)).empty());
  events = book.Readmit(d0, "operator", At(1000));
  ASSERT_EQ(Kinds(events), Strings({"engine_readmitted(d0)"}));
  EXPECT_EQ(book.State(d0, At(1000)), PlacementState::kServing);
}

TEST(BreakerBookTest, OperatorReleasesAQuarantine) {
  RecoverySettings recovery = Recovery();
  recovery.failure_quarantine_s = 30;
  BreakerBook book(Engines(2, 2), recovery);
  const size_t d0 = Idx(book, "d0");
  EXPECT_TRUE(book.ReleaseQuarantine(d0, "operator").empty());
  Fail(book, "d0", BreakerClass::kTimeout, 1, At(1));
  ASSERT_EQ(book.State(d0, At(1)), PlacementState::kQuarantined);
  const std::vector<BreakerEvent> events = book.ReleaseQuarantine(d0, "operator");
  ASSERT_EQ(Kinds(events), Strings({"engine_hold_ended(d0)"}));
  EXPECT_EQ(events[0].hold_kind, HoldKind::kTimed);
  EXPECT_EQ(events[0].cause, "operator");
  EXPECT_EQ(book.State(d0, At(1)), PlacementState::kServing);
}

TEST(BreakerBookTest, IsLastForARoleCountsEnginesThatCanServeTheRole) {
  std::vector<EngineSettings> engines = {Engine("b0", Role::kBoth), Engine("p0", Role::kPrefill)};
  BreakerBook book(engines, Recovery());
  // p0 covers b0's prefill role, but nothing else decodes.
  EXPECT_TRUE(book.IsLastForARole(Idx(book, "b0"), At(0)));
  EXPECT_FALSE(book.IsLastForARole(Idx(book, "p0"), At(0)));
  EXPECT_EQ(Kinds(Fail(book, "b0", BreakerClass::kInferenceStatus, 3, At(0))),
            Strings({"engine_hold_suppressed(b0)"}));
  EXPECT_EQ(Kinds(Fail(book, "p0", BreakerClass::kInferenceStatus, 3, At(0), Phase::kPrefill)),
            Strings({"engine_hold_started(p0)"}));
}

}  // namespace
}  // namespace narwhal::router
