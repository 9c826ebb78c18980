// The readmission policy (router/fleet/readmission.h, SPEC B17) over a real Fleet
// and Prober with scripted engines on the injected clock: which validation
// an engine needs, the evidence its readmission records, and what a refused
// readmission publishes.
#include "router/fleet/readmission.h"

#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engines/engine_failure.h"
#include "router/common/metrics.h"
#include "router/common/settings.h"
#include "router/fleet/event_bus.h"
#include "router/fleet/fleet.h"
#include "router/fleet/prober.h"
#include "tests/fakes/control_loop.h"
#include "tests/fakes/fake_clock.h"
#include "tests/fakes/scripted_engines.h"

namespace narwhal::breaker_test {
namespace {

using engines::BreakerClass;
using json = nlohmann::json;
using router::PlacementState;
using router::ProbeKind;
using router::Role;
using testing::ScriptedEngines;

class ReadmissionTest : public ::testing::Test {
 protected:
  ReadmissionTest() : metrics_(registry_) {
    settings_.model = "m";
    settings_.engines = {{"p0", "http://p0.test:8000", Role::kPrefill},
                         {"p1", "http://p1.test:8000", Role::kPrefill},
                         {"d0", "http://d0.test:8000", Role::kDecode},
                         {"d1", "http://d1.test:8000", Role::kDecode}};
    settings_.engine.first_token_timeout_s = 0.75;
    settings_.engine.health_timeout_s = 1;
    settings_.recovery.eject_after = 3;
    settings_.recovery.readmit_interval_s = 2;
    settings_.recovery.liveness_interval_s = 0;
  }

  void Build() {
    fleet_ = std::make_unique<router::Fleet>(settings_, clock_, &metrics_, nullptr, &bus_);
    engines_ = std::make_unique<ScriptedEngines>(clock_, &clock_, 0.75);
    prober_ = std::make_unique<router::Prober>(*engines_, fleet_->control(), clock_);
  }

  router::EngineSnapshot Snapshot(const std::string& iid) { return *fleet_->admin().Snapshot(iid); }

  void HoldOnStreamEvidence(const std::string& iid) {
    for (int k = 0; k < 3; ++k) {
      engines::EngineFailure f;
      f.phase = engines::Phase::kDecode;
      f.reason = engines::FailureReason::kInvalidResponse;
      f.breaker_class = BreakerClass::kStream;
      f.iid = f.evidence_iid = iid;
      f.detail = "stream ended before the [DONE] terminator";
      fleet_->control().RecordFailure(f, "p0");
    }
  }

  absl::StatusOr<router::ReadmitResult> ValidateAndReadmitNow(const std::string& iid, bool pinned) {
    return loop_.Run(router::ValidateAndReadmit(fleet_->admin(), *prober_, iid, pinned));
  }

  std::vector<json> BusEvents(const std::string& kind) {
    std::vector<json> out;
    for (const json& e : bus_.Since(0)) {
      if (e.value("event", "") == kind) out.push_back(e);
    }
    return out;
  }

  router::Settings settings_;
  testing::ControlLoop loop_;  // the control plane's loop
  testing::FakeClock clock_;
  prometheus::Registry registry_;
  router::Metrics metrics_;
  router::EventBus bus_;
  std::unique_ptr<router::Fleet> fleet_;
  std::unique_ptr<ScriptedEngines> engines_;
  std::unique_ptr<router::Prober> prober_;
};

TEST(ReadmissionPlanTest, InferenceEvidenceNeedsAnInferenceProbe) {
  router::EngineSnapshot s;
  s.state = PlacementState::kHeld;
  EXPECT_EQ(router::PlanReadmission(s, false).validation, ProbeKind::kInference);
  EXPECT_EQ(router::PlanReadmission(s, false).evidence, "verification");
  s.state = PlacementState::kEjected;
  s.inference_suspect = true;
  EXPECT_EQ(router::PlanReadmission(s, false).validation, ProbeKind::kInference);
  s.inference_suspect = false;
  EXPECT_EQ(router::PlanReadmission(s, false).validation, ProbeKind::kHealth);
  EXPECT_EQ(router::PlanReadmission(s, false).evidence, "health");
  s.state = PlacementState::kQuarantined;
  EXPECT_EQ(router::PlanReadmission(s, false).validation, ProbeKind::kHealth);
  s.state = PlacementState::kDraining;
  EXPECT_EQ(router::PlanReadmission(s, false).validation, ProbeKind::kHealth);
  // A pinned contract: the probe re-checks it, the evidence says so.
  EXPECT_EQ(router::PlanReadmission(s, true).evidence, "lifecycle");
  s.state = PlacementState::kHeld;
  EXPECT_EQ(router::PlanReadmission(s, true).validation, ProbeKind::kInference);
  EXPECT_EQ(router::PlanReadmission(s, true).evidence, "lifecycle");
}

TEST_F(ReadmissionTest, ServingEngineIsLeftAlone) {
  Build();
  absl::StatusOr<router::ReadmitResult> r = ValidateAndReadmitNow("d0", false);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->readmitted);
  EXPECT_TRUE(engines_->calls().empty());
  EXPECT_TRUE(bus_.Since(0).empty());
}

TEST_F(ReadmissionTest, UnknownOrEmptyIidIsRefused) {
  Build();
  EXPECT_EQ(ValidateAndReadmitNow("x9", false).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ValidateAndReadmitNow("", false).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ReadmissionTest, EjectedEngineReturnsThroughAHealthCheck) {
  Build();
  ASSERT_TRUE(fleet_->admin().Eject("d1", "maintenance").ok());
  clock_.Advance(30);
  absl::StatusOr<router::ReadmitResult> r = ValidateAndReadmitNow("d1", false);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->readmitted);
  EXPECT_EQ(r->plan.validation, ProbeKind::kHealth);
  EXPECT_EQ(r->plan.evidence, "health");
  EXPECT_EQ(Snapshot("d1").state, PlacementState::kServing);
  ASSERT_EQ(engines_->calls("control").size(), 2u);
  EXPECT_EQ(engines_->calls("control")[0].path, "GET /health");
  EXPECT_EQ(engines_->calls("control")[1].path, "GET /v1/models");
  EXPECT_EQ(fleet_->admin().EventCounts()["d1"].readmissions, 1);
  EXPECT_EQ(fleet_->admin().EventCounts()["d1"].last_readmission_evidence, "health");
  const std::vector<json> readmitted = BusEvents("engine_readmitted");
  ASSERT_EQ(readmitted.size(), 1u);
  EXPECT_EQ(readmitted[0]["evidence"], "health");
}

TEST_F(ReadmissionTest, FailedValidationRefusesAndPublishesWhy) {
  Build();
  ASSERT_TRUE(fleet_->admin().Eject("d1", "maintenance").ok());
  engines_->SetControl("d1", "/health", {0, "", "connection refused"});
  absl::StatusOr<router::ReadmitResult> r = ValidateAndReadmitNow("d1", false);
  ASSERT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("readmission of d1 refused: health validation failed"),
            std::string::npos)
      << r.status();
  EXPECT_EQ(Snapshot("d1").state, PlacementState::kEjected);
  const std::vector<json> refused = BusEvents("engine_readmit_refused");
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_EQ(refused[0]["iid"], "d1");
  EXPECT_EQ(refused[0]["cause"], "operator");
  EXPECT_EQ(refused[0]["probe_kind"], "health");
  EXPECT_EQ(refused[0]["outcome"], "failed");
  EXPECT_TRUE(refused[0].contains("detail"));
  EXPECT_TRUE(BusEvents("engine_readmitted").empty());
  EXPECT_EQ(fleet_->admin().EventCounts()["d1"].readmissions, 0);
}

TEST_F(ReadmissionTest, HeldEngineReturnsThroughAnInferenceProbe) {
  Build();
  HoldOnStreamEvidence("d0");
  ASSERT_EQ(Snapshot("d0").state, PlacementState::kHeld);
  engines_->ClearCalls();
  absl::StatusOr<router::ReadmitResult> r = ValidateAndReadmitNow("d0", false);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->readmitted);
  EXPECT_EQ(r->plan.validation, ProbeKind::kInference);
  EXPECT_EQ(r->plan.evidence, "verification");
  EXPECT_EQ(Snapshot("d0").state, PlacementState::kServing);
  // The inference probe ran a prefill and a decode on d0, no health check.
  EXPECT_EQ(engines_->calls("decode").size(), 1u);
  EXPECT_TRUE(engines_->calls("control").empty());
  EXPECT_EQ(fleet_->admin().EventCounts()["d0"].last_readmission_evidence, "verification");
}

}  // namespace
}  // namespace narwhal::breaker_test
