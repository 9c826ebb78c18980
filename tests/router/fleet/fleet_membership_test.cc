// The fleet's membership (SPEC §13, B21-B23, B25) with a scripted engine
// client and a manual clock: join checks gate a new engine, a failing
// joiner is retried with backoff, a leaving engine finishes its legs and
// is then gone (or has them cancelled at the drain timeout), engines keep
// their state across a reconcile that does not change them, and a
// returning engine resumes its breaker state.
#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "engines/api.h"
#include "router/common/metrics.h"
#include "router/common/settings.h"
#include "router/fleet/event_bus.h"
#include "router/fleet/fleet.h"
#include "router/fleet/prober.h"
#include "tests/fakes/control_loop.h"
#include "tests/fakes/fake_clock.h"
#include "tests/fakes/scripted_engines.h"
#include "tests/router/test_util.h"

namespace narwhal::router {
namespace {

namespace nt = ::narwhal::testing;
using engines::Phase;
using json = nlohmann::json;

constexpr double kFirstToken = 0.75;
constexpr double kReadmitInterval = 2.0;

const MemberSource kFile{SourceKind::kFile, ""};
const MemberSource kAdmin{SourceKind::kAdmin, ""};

EngineSettings HostedEngine(const std::string& iid, Role role, const std::string& host = "") {
  return EngineSettings{iid, "http://" + (host.empty() ? iid : host) + ".test:8000", role};
}

class FleetMembershipTest : public ::testing::Test {
 protected:
  FleetMembershipTest() : metrics_(registry_) {
    settings_.model = "m";
    settings_.engines = {HostedEngine("p0", Role::kPrefill), HostedEngine("d0", Role::kDecode),
                         HostedEngine("d1", Role::kDecode)};
    settings_.engine.first_token_timeout_s = kFirstToken;
    settings_.engine.health_timeout_s = 1;
    settings_.recovery.readmit_interval_s = kReadmitInterval;
    settings_.recovery.liveness_interval_s = 0;
    settings_.membership.drain_timeout_s = 30;
    settings_.membership.remember_s = 600;
  }

  void Build() {
    fleet_ = std::make_unique<Fleet>(settings_, clock_, &metrics_, nullptr, &bus_);
    engines_ = std::make_unique<nt::ScriptedEngines>(clock_, &clock_, kFirstToken);
    prober_ = std::make_unique<Prober>(*engines_, fleet_->control(), clock_);
  }

  // Runs every join check that is due; returns how many ran.
  int RunJoins() {
    const std::vector<JoinTask> tasks = fleet_->control().TakeDueJoinChecks();
    for (const JoinTask& t : tasks) loop_.Run(prober_->RunJoin(t));
    return static_cast<int>(tasks.size());
  }

  std::optional<PlacementState> State(const std::string& iid) {
    std::optional<EngineSnapshot> s = fleet_->admin().Snapshot(iid);
    if (!s) return std::nullopt;
    return s->state;
  }

  // The consumers a burst of decode placements reaches.
  std::set<std::string> DecodePlacements(int n = 12) {
    std::set<std::string> seen;
    for (int k = 0; k < n; ++k) {
      std::optional<Fleet::Reservation> r = fleet_->PickAndReserve(Phase::kDecode, {});
      if (r) seen.insert(r->target().iid);
    }
    return seen;
  }

  int Events(const std::string& kind, const std::string& iid) {
    int n = 0;
    for (const json& e : bus_.Since(0))
      n += e.value("event", "") == kind && e.value("iid", "") == iid;
    return n;
  }

  double Counter(const std::string& family, const std::map<std::string, std::string>& labels) {
    return nt::MetricValue(registry_, family, labels);
  }

  bool HasSeries(const std::string& family, const std::string& iid) {
    for (const prometheus::MetricFamily& f : registry_.Collect()) {
      if (f.name != family) continue;
      for (const prometheus::ClientMetric& m : f.metric) {
        for (const prometheus::ClientMetric::Label& l : m.label) {
          if (l.name == "iid" && l.value == iid) return true;
        }
      }
    }
    return false;
  }

  Settings settings_;
  nt::ControlLoop loop_;  // the control plane's loop
  nt::FakeClock clock_;
  prometheus::Registry registry_;
  Metrics metrics_;
  EventBus bus_;
  std::unique_ptr<Fleet> fleet_;
  std::unique_ptr<nt::ScriptedEngines> engines_;
  std::unique_ptr<Prober> prober_;
};

TEST_F(FleetMembershipTest, B23_LeavingWarnsWhenNoOtherEngineOfTheRoleIsInPlacement) {
  Build();
  const MemberSource file{SourceKind::kFile, ""};
  // d1 still serves: d0 leaving takes no role out of placement.
  ::testing::internal::CaptureStderr();
  ASSERT_TRUE(fleet_->admin().RemoveEngine("d0", file).ok());
  std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(log.find("was the last engine in placement"), std::string::npos) << log;
  // d1 is a member but ejected: when d2 (the only one serving) leaves, the
  // decode role is out of placement, though a decode member is left.
  ASSERT_TRUE(fleet_->admin().AddEngine(HostedEngine("d2", Role::kDecode), kAdmin).ok());
  ASSERT_EQ(RunJoins(), 1);
  ASSERT_EQ(State("d2"), PlacementState::kServing);
  ASSERT_TRUE(fleet_->admin().Eject("d1", "test").ok());
  ::testing::internal::CaptureStderr();
  ASSERT_TRUE(fleet_->admin().RemoveEngine("d2", kAdmin).ok());
  log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("engine d2 was the last engine in placement for the decode role"),
            std::string::npos)
      << log;
  EXPECT_EQ(log.find("for the prefill role"), std::string::npos) << log;
}

TEST_F(FleetMembershipTest, B22_AJoiningEngineGetsNoLegUntilItsChecksPass) {
  Build();
  ASSERT_TRUE(fleet_->admin().AddEngine(HostedEngine("d2", Role::kDecode), kAdmin).ok());
  EXPECT_EQ(State("d2"), PlacementState::kJoining);
  EXPECT_EQ(fleet_->admin().Snapshot("d2")->source, "admin");
  EXPECT_EQ(DecodePlacements(), (std::set<std::string>{"d0", "d1"}));
  EXPECT_EQ(fleet_->admin().AddEngine(HostedEngine("d2", Role::kDecode), kAdmin).code(),
            absl::StatusCode::kAlreadyExists);

  ASSERT_EQ(RunJoins(), 1);
  // Health, the served model, then a prefill on a live producer decoded by
  // the joiner.
  std::vector<std::string> control;
  for (const nt::Call& c : engines_->calls("control", "d2")) control.push_back(c.path);
  EXPECT_EQ(control, (std::vector<std::string>{"GET /health", "GET /v1/models", "GET /v1/models"}));
  ASSERT_EQ(engines_->calls("prefill", "p0").size(), 1u);
  ASSERT_EQ(engines_->calls("decode", "d2").size(), 1u);
  EXPECT_EQ(engines_->calls("decode", "d2")[0].handoff_producer, "p0");

  EXPECT_EQ(State("d2"), PlacementState::kServing);
  EXPECT_TRUE(fleet_->control().Checked("d2"));
  EXPECT_EQ(DecodePlacements(), (std::set<std::string>{"d0", "d1", "d2"}));
  EXPECT_EQ(Events("engine_joined", "d2"), 1);
  EXPECT_EQ(
      Counter("narwhal_membership_changes_total", {{"source", "admin"}, {"change", "joined"}}), 1);
}

TEST_F(FleetMembershipTest, B22_AFailingJoinerIsRetriedWithBackoffAndNeverPlaced) {
  Build();
  engines_->SetControl("d2", "/health", {0, "", "connection refused"});
  ASSERT_TRUE(fleet_->admin().AddEngine(HostedEngine("d2", Role::kDecode), kAdmin).ok());
  ASSERT_EQ(RunJoins(), 1);
  EXPECT_EQ(State("d2"), PlacementState::kJoining);
  EXPECT_EQ(Events("engine_join_failed", "d2"), 1);
  EXPECT_NE(fleet_->admin().Snapshot("d2")->explanation.find("connection refused"),
            std::string::npos)
      << fleet_->admin().Snapshot("d2")->explanation;
  EXPECT_EQ(RunJoins(), 0);  // not before readmit_interval_s
  clock_.Advance(kReadmitInterval);
  ASSERT_EQ(RunJoins(), 1);  // second failure: twice the interval next
  clock_.Advance(kReadmitInterval);
  EXPECT_EQ(RunJoins(), 0);
  clock_.Advance(kReadmitInterval);
  engines_->SetControl("d2", "/health", {200, "", ""});
  ASSERT_EQ(RunJoins(), 1);
  EXPECT_EQ(State("d2"), PlacementState::kServing);
  EXPECT_EQ(
      Counter("narwhal_membership_changes_total", {{"source", "admin"}, {"change", "join_failed"}}),
      2);
  // It never took a client leg meanwhile: its only decodes are the probe's.
  for (const nt::Call& c : engines_->calls("decode", "d2")) {
    EXPECT_EQ(c.options.backend_request_id.rfind("narwhal-probe-", 0), 0u);
  }
}

TEST_F(FleetMembershipTest, B22_AJoinerThatFailsItsInferenceProbeStaysOut) {
  Build();
  nt::DecodeScript silent;
  silent.silent = true;
  engines_->SetDecode("d2", silent);
  ASSERT_TRUE(fleet_->admin().AddEngine(HostedEngine("d2", Role::kDecode), kAdmin).ok());
  ASSERT_EQ(RunJoins(), 1);
  EXPECT_EQ(State("d2"), PlacementState::kJoining);
  EXPECT_NE(fleet_->admin().Snapshot("d2")->explanation.find("no first token"), std::string::npos)
      << fleet_->admin().Snapshot("d2")->explanation;
}

TEST_F(FleetMembershipTest, B22_WithoutJoinChecksAnEngineIsPlacedAtOnce) {
  settings_.membership.join_checks = false;
  Build();
  ASSERT_TRUE(fleet_->admin().AddEngine(HostedEngine("d2", Role::kDecode), kAdmin).ok());
  EXPECT_EQ(State("d2"), PlacementState::kServing);
  EXPECT_EQ(RunJoins(), 0);
  EXPECT_EQ(Events("engine_joined", "d2"), 1);
}

TEST_F(FleetMembershipTest, B23_ALeavingEngineFinishesItsLegsAndIsThenGone) {
  Build();
  std::optional<Fleet::Reservation> leg = fleet_->PickAndReserve(Phase::kDecode, {"d1"});
  ASSERT_TRUE(leg);
  ASSERT_EQ(leg->target().iid, "d0");
  const MembershipChange change = fleet_->admin().Reconcile(
      kFile, {HostedEngine("p0", Role::kPrefill), HostedEngine("d1", Role::kDecode)});
  EXPECT_EQ(change.left, std::vector<std::string>{"d0"});
  // No new leg; listed as draining while its leg runs.
  EXPECT_EQ(DecodePlacements(), std::set<std::string>{"d1"});
  EXPECT_EQ(State("d0"), PlacementState::kLeaving);
  EXPECT_EQ(fleet_->admin().Snapshot("d0")->inflight_decode, 1);
  EXPECT_EQ(Events("engine_left", "d0"), 1);
  fleet_->control().SweepLeaving();
  EXPECT_TRUE(fleet_->admin().Snapshot("d0").has_value());
  EXPECT_TRUE(HasSeries("narwhal_engine_breaker_streak", "d0"));
  // The leg ends: the engine is gone, and so are its series.
  leg->Release();
  fleet_->control().SweepLeaving();
  EXPECT_FALSE(fleet_->admin().Snapshot("d0").has_value());
  EXPECT_FALSE(HasSeries("narwhal_engine_breaker_streak", "d0"));
  EXPECT_FALSE(HasSeries("narwhal_engine_inflight", "d0"));
  EXPECT_FALSE(HasSeries("narwhal_attempt_failures_total", "d0"));
  EXPECT_EQ(Counter("narwhal_membership_changes_total", {{"source", "file"}, {"change", "left"}}),
            1);
  // A leave is never breaker evidence.
  EXPECT_EQ(Events("engine_ejected", "d0"), 0);
}

TEST_F(FleetMembershipTest, B23_LegsOutlastingTheDrainTimeoutAreCancelled) {
  Build();
  std::optional<Fleet::Reservation> leg = fleet_->PickAndReserve(Phase::kDecode, {"d1"});
  ASSERT_TRUE(leg);
  EngineRef d0 = leg->engine();
  fleet_->admin().Reconcile(
      kFile, {HostedEngine("p0", Role::kPrefill), HostedEngine("d1", Role::kDecode)});
  clock_.Advance(29.9);
  fleet_->control().SweepLeaving();
  EXPECT_FALSE(d0->removed().cancelled());
  clock_.Advance(0.2);
  fleet_->control().SweepLeaving();
  EXPECT_TRUE(d0->removed().cancelled());
  EXPECT_NE(fleet_->admin().Snapshot("d0")->explanation.find("cancelled"), std::string::npos);
  leg->Release();
  fleet_->control().SweepLeaving();
  EXPECT_FALSE(fleet_->admin().Snapshot("d0").has_value());
}

TEST_F(FleetMembershipTest, B21_AnUnchangedEngineKeepsItsStateAndAChangedOneJoinsAgain) {
  Build();
  ASSERT_TRUE(fleet_->admin().Eject("d1", "maintenance").ok());
  // The same engines in another order, d0 with a new url.
  const MembershipChange change = fleet_->admin().Reconcile(
      kFile, {HostedEngine("d1", Role::kDecode), HostedEngine("d0", Role::kDecode, "d0-new"),
              HostedEngine("p0", Role::kPrefill)});
  EXPECT_TRUE(change.joined.empty());
  EXPECT_TRUE(change.left.empty());
  EXPECT_EQ(change.changed, std::vector<std::string>{"d0"});
  EXPECT_EQ(State("d1"), PlacementState::kEjected);  // kept
  EXPECT_EQ(State("d0"), PlacementState::kJoining);  // a new incarnation
  EXPECT_EQ(fleet_->admin().Snapshot("d0")->settings.url, "http://d0-new.test:8000");
}

TEST_F(FleetMembershipTest, B21_WhatALegOfAnIncarnationThatLeftSaysIsNotAboutItsSuccessor) {
  Build();
  // A crossed decode on d0 (produced by p0) is running when d0 moves.
  std::optional<Fleet::Reservation> prefill = fleet_->PickAndReserve(Phase::kPrefill, {});
  std::optional<Fleet::Reservation> leg = fleet_->PickAndReserve(Phase::kDecode, {"d1"});
  ASSERT_TRUE(prefill && leg);
  ASSERT_EQ(leg->target().iid, "d0");
  AttemptReport old_failure;
  old_failure.producer = "p0";
  old_failure.producer_incarnation = prefill->engine()->id();
  old_failure.consumer = "d0";
  old_failure.consumer_incarnation = leg->engine()->id();
  old_failure.crossed_decode = true;
  old_failure.decode_failed = true;
  old_failure.failure = engines::MakeFailure(
      Phase::kDecode, "d0", engines::FailureReason::kEngineTimeout, engines::BreakerClass::kStream,
      engines::FailureCause::kNone, "went silent", true);
  AttemptReport old_success = old_failure;
  old_success.failure.reset();
  old_success.decode_failed = false;
  old_success.decode_ok = true;
  fleet_->admin().Reconcile(
      kFile, {HostedEngine("p0", Role::kPrefill), HostedEngine("d0", Role::kDecode, "d0-new"),
              HostedEngine("d1", Role::kDecode)});
  ASSERT_EQ(RunJoins(), 1);
  ASSERT_EQ(State("d0"), PlacementState::kServing);
  const int stream = static_cast<int>(engines::BreakerClass::kStream);

  // The old leg's failure is no evidence against the new d0.
  fleet_->Report(old_failure);
  EXPECT_EQ(fleet_->admin().Snapshot("d0")->streak[stream], 0);
  EXPECT_EQ(Events("engine_hold_started", "d0") + Events("engine_hold_suppressed", "d0"), 0);

  // The new incarnation's failures are, and an old leg's success does not
  // clear their streak.
  AttemptReport new_failure = old_failure;
  for (const ViewEngine& e : fleet_->View()->engines) {
    if (e.engine->iid() == "d0") new_failure.consumer_incarnation = e.engine->id();
  }
  ASSERT_NE(new_failure.consumer_incarnation, old_failure.consumer_incarnation);
  fleet_->Report(new_failure);
  fleet_->Report(old_success);
  fleet_->Report(new_failure);
  EXPECT_EQ(fleet_->admin().Snapshot("d0")->streak[stream], 2);
  leg->Release();
  prefill->Release();
}

TEST_F(FleetMembershipTest, B21_AnEngineReturningWithinRememberSResumesItsBreakerState) {
  Build();
  ASSERT_TRUE(fleet_->admin().Eject("d1", "maintenance").ok());
  fleet_->admin().Reconcile(
      kFile, {HostedEngine("p0", Role::kPrefill), HostedEngine("d0", Role::kDecode)});
  fleet_->control().SweepLeaving();
  ASSERT_FALSE(fleet_->admin().Snapshot("d1").has_value());
  clock_.Advance(60);
  fleet_->admin().Reconcile(kFile,
                            {HostedEngine("p0", Role::kPrefill), HostedEngine("d0", Role::kDecode),
                             HostedEngine("d1", Role::kDecode)});
  ASSERT_EQ(RunJoins(), 1);
  // Joined, and still ejected until a probe (here: the operator) readmits it.
  EXPECT_EQ(State("d1"), PlacementState::kEjected);
  EXPECT_EQ(fleet_->admin().Snapshot("d1")->ejection_cause, EjectCause::kOperator);

  // After remember_s it starts afresh.
  ASSERT_TRUE(fleet_->admin().Eject("d1", "again").ok());
  fleet_->admin().Reconcile(
      kFile, {HostedEngine("p0", Role::kPrefill), HostedEngine("d0", Role::kDecode)});
  fleet_->control().SweepLeaving();
  clock_.Advance(601);
  fleet_->control().SweepLeaving();
  fleet_->admin().Reconcile(kFile,
                            {HostedEngine("p0", Role::kPrefill), HostedEngine("d0", Role::kDecode),
                             HostedEngine("d1", Role::kDecode)});
  ASSERT_EQ(RunJoins(), 1);
  EXPECT_EQ(State("d1"), PlacementState::kServing);
}

TEST_F(FleetMembershipTest, B25_RemoveEngineOnlyForItsOwnSource) {
  Build();
  EXPECT_EQ(fleet_->admin().RemoveEngine("d0", kAdmin).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(fleet_->admin().RemoveEngine("x9", kAdmin).code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(fleet_->admin().AddEngine(HostedEngine("d2", Role::kDecode), kAdmin).ok());
  EXPECT_TRUE(fleet_->admin().RemoveEngine("d2", kAdmin).ok());
  EXPECT_EQ(State("d2"), PlacementState::kLeaving);
  // A reload of the file leaves runtime engines alone.
  ASSERT_TRUE(fleet_->admin().AddEngine(HostedEngine("d3", Role::kDecode), kAdmin).ok());
  fleet_->admin().Reconcile(
      kFile, {HostedEngine("p0", Role::kPrefill), HostedEngine("d0", Role::kDecode)});
  EXPECT_EQ(State("d3"), PlacementState::kJoining);
  EXPECT_EQ(State("d1"), PlacementState::kLeaving);
}

TEST_F(FleetMembershipTest, FleetEnginesGaugeCountsEveryState) {
  Build();
  ASSERT_TRUE(fleet_->admin().AddEngine(HostedEngine("d2", Role::kDecode), kAdmin).ok());
  fleet_->admin().Reconcile(
      kFile, {HostedEngine("p0", Role::kPrefill), HostedEngine("d0", Role::kDecode)});
  auto gauge = [&](const std::string& role, const std::string& state) {
    return nt::MetricValue(registry_, "narwhal_fleet_engines", {{"role", role}, {"state", state}});
  };
  EXPECT_EQ(gauge("decode", "serving"), 1);   // d0
  EXPECT_EQ(gauge("decode", "joining"), 1);   // d2
  EXPECT_EQ(gauge("decode", "draining"), 1);  // d1, leaving
  EXPECT_EQ(gauge("prefill", "serving"), 1);
  fleet_->control().SweepLeaving();
  EXPECT_EQ(gauge("decode", "draining"), 0);
}

}  // namespace
}  // namespace narwhal::router
