// Fleet + Prober (+ FleetMonitor) with a scripted engine client and a manual
// clock (SPEC B17; reference behaviour §8): which producer an inference
// probe uses, producer_failed, prefill-side probes, each leg's first-token
// bound, lifecycle validation with a pinned engine_contract, health and
// liveness probes, and what every change publishes — metrics, journal event
// rows and EventBus events.
#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "engines/api.h"
#include "engines/engine_failure.h"
#include "router/common/journal.h"
#include "router/common/metrics.h"
#include "router/common/settings.h"
#include "router/fleet/breaker_book.h"
#include "router/fleet/event_bus.h"
#include "router/fleet/fleet.h"
#include "router/fleet/fleet_monitor.h"
#include "router/fleet/prober.h"
#include "tests/fakes/control_loop.h"
#include "tests/fakes/fake_clock.h"
#include "tests/fakes/scripted_engines.h"

namespace narwhal::prober_test {
namespace {

using engines::BreakerClass;
using engines::EngineFailure;
using engines::FailureReason;
using engines::Phase;
using json = nlohmann::json;
using router::PlacementState;
using router::ProbeKind;
using router::ProbeTask;
using router::Role;
using testing::Call;
using testing::DecodeScript;
using testing::Failure;
using testing::Refused;
using testing::ScriptedEngines;

constexpr double kFirstToken = 0.75;
constexpr double kInterval = 2.0;

class FleetProberTest : public ::testing::Test {
 protected:
  FleetProberTest() : metrics_(registry_) {
    settings_.model = "m";
    settings_.engines = {{"p0", "http://p0.test:8000", Role::kPrefill},
                         {"p1", "http://p1.test:8000", Role::kPrefill},
                         {"d0", "http://d0.test:8000", Role::kDecode},
                         {"d1", "http://d1.test:8000", Role::kDecode}};
    settings_.engine.first_token_timeout_s = kFirstToken;
    settings_.engine.health_timeout_s = 1;
    settings_.recovery.eject_after = 3;
    settings_.recovery.readmit_interval_s = kInterval;
    settings_.recovery.liveness_interval_s = 0;
    settings_.recovery.liveness_misses = 2;
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    journal_path_ = ::testing::TempDir() + "breakers_" + info->name() + ".jsonl";
    std::remove(journal_path_.c_str());
  }

  // Builds the fleet from settings_ (tests adjust settings_ first).
  void Build() {
    auto journal = router::Journal::Open(journal_path_);
    ASSERT_TRUE(journal.ok()) << journal.status();
    journal_ = std::move(*journal);
    fleet_ = std::make_unique<router::Fleet>(settings_, clock_, &metrics_, journal_.get(), &bus_);
    engines_ = std::make_unique<ScriptedEngines>(clock_, &clock_, kFirstToken);
    prober_ = std::make_unique<router::Prober>(*engines_, fleet_->control(), clock_);
  }

  // `n` failures of a client decode leg on `iid` (its producer `producer`).
  void FailDecode(const std::string& iid, BreakerClass cls, int n, const std::string& producer) {
    for (int k = 0; k < n; ++k) {
      EngineFailure f;
      f.phase = Phase::kDecode;
      f.reason = FailureReason::kEngineTimeout;
      f.breaker_class = cls;
      f.iid = iid;
      f.evidence_iid = iid;
      f.cause = engines::FailureCause::kFirstTokenTimeout;
      f.detail = "no first token within 0.75s: no frames at all";
      fleet_->control().RecordFailure(f, producer);
    }
  }

  // `n` invalid continuations (B3): decode on `consumer` rejected the
  // handoff of `producer` before any request; evidence against the producer.
  void FailContinuation(const std::string& producer, const std::string& consumer, int n) {
    for (int k = 0; k < n; ++k) {
      EngineFailure f;
      f.phase = Phase::kDecode;
      f.reason = FailureReason::kInvalidResponse;
      f.breaker_class = BreakerClass::kKvHandoff;
      f.iid = consumer;
      f.evidence_iid = producer;
      f.cause = engines::FailureCause::kInvalidContinuation;
      f.detail = "invalid continuation: remote_engine_id missing";
      fleet_->control().RecordFailure(f, producer);
    }
  }

  PlacementState State(const std::string& iid) { return fleet_->admin().Snapshot(iid)->state; }

  // Takes the due probes and expects exactly one, for `iid`, of `kind`.
  ProbeTask TakeOne(const std::string& iid, ProbeKind kind) {
    const std::vector<ProbeTask> tasks = fleet_->control().TakeDueProbes();
    EXPECT_EQ(tasks.size(), 1u);
    if (tasks.empty()) return ProbeTask{};
    EXPECT_EQ(tasks[0].iid, iid);
    EXPECT_EQ(tasks[0].kind, kind);
    return tasks[0];
  }

  // The value of one series, or -1 when it does not exist.
  double Metric(const std::string& family, const std::map<std::string, std::string>& labels) {
    for (const prometheus::MetricFamily& f : registry_.Collect()) {
      if (f.name != family) continue;
      for (const prometheus::ClientMetric& m : f.metric) {
        std::map<std::string, std::string> got;
        for (const prometheus::ClientMetric::Label& l : m.label) got[l.name] = l.value;
        if (got != labels) continue;
        return f.type == prometheus::MetricType::Counter ? m.counter.value : m.gauge.value;
      }
    }
    return -1;
  }

  std::vector<json> JournalRows() {
    journal_->Flush();  // rows are written by the journal's own thread
    std::vector<json> rows;
    std::ifstream in(journal_path_);
    for (std::string line; std::getline(in, line);) {
      if (!line.empty()) rows.push_back(json::parse(line));
    }
    return rows;
  }
  // Journal event rows of `kind` about `iid`.
  std::vector<json> Events(const std::string& kind, const std::string& iid) {
    std::vector<json> out;
    for (const json& row : JournalRows()) {
      if (row.value("event", "") == kind && row.value("iid", "") == iid) out.push_back(row);
    }
    return out;
  }

  router::Settings settings_;
  testing::ControlLoop loop_;  // the control plane's loop
  testing::FakeClock clock_;
  prometheus::Registry registry_;
  router::Metrics metrics_;
  router::EventBus bus_;
  std::string journal_path_;
  std::unique_ptr<router::Journal> journal_;
  std::unique_ptr<router::Fleet> fleet_;
  std::unique_ptr<ScriptedEngines> engines_;
  std::unique_ptr<router::Prober> prober_;
};

// ----------------------------------------------------- crossed-decode probe

TEST_F(FleetProberTest, HeldDecodeEngineIsProbedWithANewHandoffFromTheOriginalProducer) {
  Build();
  // p1 produced the failed transfers; p0 would come first among live
  // producers (fewest prefills, then iid).
  FailDecode("d0", BreakerClass::kStream, 3, "p1");
  ASSERT_EQ(State("d0"), PlacementState::kHeld);
  EXPECT_EQ(Metric("narwhal_engine_held", {{"iid", "d0"}, {"kind", "inference"}}), 1);
  EXPECT_EQ(Metric("narwhal_engine_breaker_streak", {{"iid", "d0"}, {"class", "stream"}}), 3);

  const ProbeTask task = TakeOne("d0", ProbeKind::kInference);
  loop_.Run(prober_->Run(task));

  const std::vector<Call> prefills = engines_->calls("prefill");
  const std::vector<Call> decodes = engines_->calls("decode");
  ASSERT_EQ(prefills.size(), 1u);
  EXPECT_EQ(prefills[0].iid, "p1");
  EXPECT_EQ(prefills[0].body["max_tokens"], 1);
  EXPECT_NE(prefills[0].body["prompt"].get<std::string>().find("breaker verification"),
            std::string::npos);
  ASSERT_EQ(decodes.size(), 1u);
  EXPECT_EQ(decodes[0].iid, "d0");
  EXPECT_EQ(decodes[0].handoff_producer, "p1");
  // A new handoff: the one this probe's prefill leg just made.
  EXPECT_EQ(decodes[0].handoff_request_id, prefills[0].options.backend_request_id);
  EXPECT_EQ(prefills[0].options.backend_request_id.rfind("narwhal-probe-", 0), 0u);
  EXPECT_NE(decodes[0].options.backend_request_id, prefills[0].options.backend_request_id);

  EXPECT_EQ(State("d0"), PlacementState::kServing);
  EXPECT_EQ(Metric("narwhal_engine_held", {{"iid", "d0"}, {"kind", "inference"}}), 0);
  EXPECT_EQ(Metric("narwhal_engine_breaker_streak", {{"iid", "d0"}, {"class", "stream"}}), 0);
  EXPECT_EQ(Metric("narwhal_engine_probes_total",
                   {{"iid", "d0"}, {"kind", "inference"}, {"outcome", "passed"}}),
            1);
  EXPECT_EQ(
      Metric("narwhal_engine_readmissions_total", {{"iid", "d0"}, {"evidence", "verification"}}),
      1);

  // Journal event rows, in order.
  std::vector<std::string> kinds;
  for (const json& row : JournalRows()) kinds.push_back(row.value("event", "?"));
  EXPECT_EQ(kinds, std::vector<std::string>({"engine_hold_started", "engine_probe",
                                             "engine_hold_ended", "engine_readmitted"}));
  const std::vector<json> probes = Events("engine_probe", "d0");
  ASSERT_EQ(probes.size(), 1u);
  EXPECT_EQ(probes[0]["probe_kind"], "inference");
  EXPECT_EQ(probes[0]["outcome"], "passed");
  EXPECT_EQ(probes[0]["producer"], "p1");
  const std::vector<json> started = Events("engine_hold_started", "d0");
  ASSERT_EQ(started.size(), 1u);
  EXPECT_EQ(started[0]["hold_kind"], "inference");
  EXPECT_EQ(Events("engine_readmitted", "d0").at(0)["evidence"], "verification");

  // The same events on the bus, stamped with increasing seq.
  const std::vector<json> bus = bus_.Since(0);
  ASSERT_EQ(bus.size(), 4u);
  for (size_t k = 0; k < bus.size(); ++k) {
    EXPECT_EQ(bus[k]["event"], kinds[k]);
    EXPECT_EQ(bus[k]["seq"], static_cast<long long>(k + 1));
  }
  EXPECT_EQ(bus[1]["producer"], "p1");
}

TEST_F(FleetProberTest, ProducerFailedTriesTheNextLiveProducerThenStandalone) {
  Build();
  FailDecode("d0", BreakerClass::kStream, 3, "p1");
  engines_->SetPrefill("p1", {Refused()});
  engines_->SetPrefill("p0", {Refused()});
  loop_.Run(prober_->Run(TakeOne("d0", ProbeKind::kInference)));

  std::vector<std::string> order;
  for (const Call& c : engines_->calls("prefill")) order.push_back(c.iid);
  EXPECT_EQ(order, std::vector<std::string>({"p1", "p0", "d0"}));
  const std::vector<Call> decodes = engines_->calls("decode");
  ASSERT_EQ(decodes.size(), 1u);
  EXPECT_EQ(decodes[0].iid, "d0");
  EXPECT_EQ(decodes[0].handoff_producer, "d0");  // standalone: a same-worker decode

  const std::vector<json> probes = Events("engine_probe", "d0");
  ASSERT_EQ(probes.size(), 3u);
  EXPECT_EQ(probes[0]["outcome"], "producer_failed");
  EXPECT_EQ(probes[0]["producer"], "p1");
  EXPECT_EQ(probes[0]["detail"], "engine unreachable: connection refused");
  EXPECT_EQ(probes[1]["outcome"], "producer_failed");
  EXPECT_EQ(probes[1]["producer"], "p0");
  EXPECT_EQ(probes[2]["outcome"], "passed");
  EXPECT_EQ(probes[2]["producer"], "d0");
  EXPECT_EQ(Metric("narwhal_engine_probes_total",
                   {{"iid", "d0"}, {"kind", "inference"}, {"outcome", "producer_failed"}}),
            2);
  EXPECT_EQ(State("d0"), PlacementState::kServing);
}

TEST_F(FleetProberTest, NoProducerAtAllIsInconclusiveAndKeepsTheHold) {
  Build();
  FailDecode("d0", BreakerClass::kStream, 3, "p1");
  for (const std::string iid : {"p0", "p1", "d0"}) engines_->SetPrefill(iid, {Refused()});
  loop_.Run(prober_->Run(TakeOne("d0", ProbeKind::kInference)));
  EXPECT_TRUE(engines_->calls("decode").empty());
  EXPECT_EQ(State("d0"), PlacementState::kHeld);
  const std::vector<json> probes = Events("engine_probe", "d0");
  ASSERT_EQ(probes.size(), 4u);
  EXPECT_EQ(probes[3]["outcome"], "inconclusive");
  EXPECT_EQ(probes[3]["detail"], "no producer could make a handoff");
  // Back on the normal cadence.
  EXPECT_TRUE(fleet_->control().TakeDueProbes().empty());
  clock_.Advance(kInterval);
  TakeOne("d0", ProbeKind::kInference);
}

TEST_F(FleetProberTest, RecordedProducerOutOfPlacementIsSkipped) {
  Build();
  FailDecode("d0", BreakerClass::kStream, 3, "p1");
  ASSERT_TRUE(fleet_->admin().Eject("p1", "maintenance").ok());
  loop_.Run(prober_->Run(TakeOne("d0", ProbeKind::kInference)));
  const std::vector<Call> prefills = engines_->calls("prefill");
  ASSERT_EQ(prefills.size(), 1u);
  EXPECT_EQ(prefills[0].iid, "p0");
  EXPECT_EQ(Events("engine_probe", "d0").at(0)["producer"], "p0");
}

TEST_F(FleetProberTest, HandoffTheDecodeLegBlamesOnItsProducerTriesTheNextProducer) {
  Build();
  FailDecode("d0", BreakerClass::kStream, 3, "p1");
  // d0 rejects p1's handoff before any request (B3): p1's fault, not d0's.
  DecodeScript script;
  script.reject_handoffs_from = {"p1"};
  engines_->SetDecode("d0", script);
  loop_.Run(prober_->Run(TakeOne("d0", ProbeKind::kInference)));
  std::vector<std::string> order;
  for (const Call& c : engines_->calls("prefill")) order.push_back(c.iid);
  EXPECT_EQ(order, std::vector<std::string>({"p1", "p0"}));
  const std::vector<json> probes = Events("engine_probe", "d0");
  ASSERT_EQ(probes.size(), 2u);
  EXPECT_EQ(probes[0]["outcome"], "producer_failed");
  EXPECT_EQ(probes[0]["producer"], "p1");
  EXPECT_EQ(probes[0]["detail"], "invalid continuation: connector mismatch");
  EXPECT_EQ(probes[1]["outcome"], "passed");
  EXPECT_EQ(probes[1]["producer"], "p0");
  EXPECT_EQ(State("d0"), PlacementState::kServing);
}

TEST_F(FleetProberTest, FailedProbeEjectsACoveredDecodeEngineAndItsNextProbeReadmitsIt) {
  Build();
  FailDecode("d0", BreakerClass::kStream, 3, "p1");
  DecodeScript silent;
  silent.silent = true;
  engines_->SetDecode("d0", silent);
  loop_.Run(prober_->Run(TakeOne("d0", ProbeKind::kInference)));

  EXPECT_EQ(State("d0"), PlacementState::kEjected);
  EXPECT_EQ(Metric("narwhal_engine_ejections_total", {{"iid", "d0"}, {"cause", "inference_probe"}}),
            1);
  EXPECT_EQ(Metric("narwhal_engine_probes_total",
                   {{"iid", "d0"}, {"kind", "inference"}, {"outcome", "failed"}}),
            1);
  EXPECT_EQ(Metric("narwhal_engine_held", {{"iid", "d0"}, {"kind", "inference"}}), 0);
  EXPECT_EQ(Metric("narwhal_engine_in_placement", {{"iid", "d0"}}), 0);
  const std::vector<json> ejected = Events("engine_ejected", "d0");
  ASSERT_EQ(ejected.size(), 1u);
  EXPECT_EQ(ejected[0]["cause"], "inference_probe");
  EXPECT_EQ(Events("engine_hold_ended", "d0").at(0)["cause"], "ejected");

  // One interval later (the backoff after one failure), another inference
  // probe, again with the original producer's fresh handoff.
  engines_->SetDecode("d0", DecodeScript{});
  engines_->ClearCalls();
  EXPECT_TRUE(fleet_->control().TakeDueProbes().empty());
  clock_.Advance(kInterval);
  loop_.Run(prober_->Run(TakeOne("d0", ProbeKind::kInference)));
  ASSERT_EQ(engines_->calls("prefill").size(), 1u);
  EXPECT_EQ(engines_->calls("prefill")[0].iid, "p1");
  EXPECT_EQ(State("d0"), PlacementState::kServing);
  EXPECT_EQ(
      Metric("narwhal_engine_readmissions_total", {{"iid", "d0"}, {"evidence", "verification"}}),
      1);
  EXPECT_EQ(Metric("narwhal_engine_in_placement", {{"iid", "d0"}}), 1);
}

TEST_F(FleetProberTest, FailedProbeOfTheLastDecodeEngineEndsTheHoldUncovered) {
  Build();
  FailDecode("d0", BreakerClass::kStream, 3, "p1");
  DecodeScript silent;
  silent.silent = true;
  engines_->SetDecode("d0", silent);
  const ProbeTask task = TakeOne("d0", ProbeKind::kInference);
  // While the probe runs the other decode engine is drained: d0 is now the
  // last decode engine, so its hold ends at once ...
  ASSERT_TRUE(fleet_->admin().Drain("d1").ok());
  EXPECT_EQ(State("d0"), PlacementState::kServing);
  // ... and the failing probe does not take it out either.
  loop_.Run(prober_->Run(task));
  EXPECT_EQ(State("d0"), PlacementState::kServing);
  EXPECT_EQ(Events("engine_hold_ended", "d0").at(0)["cause"], "uncovered");
  EXPECT_TRUE(Events("engine_ejected", "d0").empty());
}

// ----------------------------------------------------------- prefill side

TEST_F(FleetProberTest, PrefillSideHoldIsProbedByProducingOnTheHeldEngine) {
  Build();
  FailContinuation("p0", "d1", 3);
  ASSERT_EQ(State("p0"), PlacementState::kHeld);
  EXPECT_EQ(State("d1"), PlacementState::kServing);  // the consumer is not blamed
  EXPECT_EQ(Metric("narwhal_engine_breaker_streak", {{"iid", "p0"}, {"class", "kv_handoff"}}), 3);
  loop_.Run(prober_->Run(TakeOne("p0", ProbeKind::kInference)));

  const std::vector<Call> prefills = engines_->calls("prefill");
  const std::vector<Call> decodes = engines_->calls("decode");
  ASSERT_EQ(prefills.size(), 1u);
  EXPECT_EQ(prefills[0].iid, "p0");
  ASSERT_EQ(decodes.size(), 1u);
  EXPECT_TRUE(decodes[0].iid == "d0" || decodes[0].iid == "d1") << decodes[0].iid;
  EXPECT_EQ(decodes[0].handoff_producer, "p0");
  EXPECT_EQ(State("p0"), PlacementState::kServing);
  EXPECT_EQ(Events("engine_readmitted", "p0").at(0)["evidence"], "verification");
}

TEST_F(FleetProberTest, PrefillSideProbeFailsWhenTheHeldEngineCannotProduce) {
  Build();
  FailContinuation("p0", "d1", 3);
  engines_->SetPrefill(
      "p0", {Failure(FailureReason::kInvalidResponse, BreakerClass::kKvHandoff,
                     engines::FailureCause::kNoHandoff, "no handoff: kv_transfer_params is null")});
  loop_.Run(prober_->Run(TakeOne("p0", ProbeKind::kInference)));
  EXPECT_TRUE(engines_->calls("decode").empty());
  EXPECT_EQ(State("p0"), PlacementState::kEjected);
  const std::vector<json> probes = Events("engine_probe", "p0");
  ASSERT_EQ(probes.size(), 1u);
  EXPECT_EQ(probes[0]["outcome"], "failed");
  EXPECT_EQ(probes[0]["detail"], "no handoff: kv_transfer_params is null");
}

// ------------------------------------------------------ leg bounds (B17)

TEST_F(FleetProberTest, EachProbeLegIsBoundedByTheFirstTokenTimeout) {
  Build();
  FailDecode("d0", BreakerClass::kStream, 3, "p1");
  engines_->SetPrefill("p1", {std::nullopt, 0.4});  // the prefill leg takes 0.4 s
  loop_.Run(prober_->Run(TakeOne("d0", ProbeKind::kInference)));
  const std::vector<Call> prefills = engines_->calls("prefill");
  const std::vector<Call> decodes = engines_->calls("decode");
  ASSERT_EQ(prefills.size(), 1u);
  ASSERT_EQ(decodes.size(), 1u);
  const auto budget = engines::FromSeconds(kFirstToken);
  // The prefill leg must finish within the budget; the request deadline is a
  // short backstop behind it so the adapter's own first-token timer (armed
  // at first_token_timeout_s) is what ends a silent decode leg.
  ASSERT_TRUE(prefills[0].options.leg_deadline.has_value());
  EXPECT_EQ(*prefills[0].options.leg_deadline, prefills[0].at + budget);
  EXPECT_EQ(prefills[0].options.request_deadline,
            *prefills[0].options.leg_deadline + std::chrono::milliseconds(250));
  // The decode leg gets its own budget from when it starts.
  EXPECT_EQ(decodes[0].at - prefills[0].at, engines::FromSeconds(0.4));
  EXPECT_EQ(decodes[0].options.request_deadline,
            decodes[0].at + budget + std::chrono::milliseconds(250));
}

// ------------------------------------------------- lifecycle validation

TEST_F(FleetProberTest, PinnedContractPassedProbeAlsoRunsLifecycleValidation) {
  settings_.engine_contract = router::EngineContract{};
  settings_.engine_contract->vllm_version = "0.29.1";
  Build();
  FailDecode("d0", BreakerClass::kStream, 3, "p1");
  engines_->SetControl("d0", "/version", {200, R"({"version": "0.30.0"})", ""});
  loop_.Run(prober_->Run(TakeOne("d0", ProbeKind::kInference)));
  // The inference legs passed, the live engine is not the pinned one.
  ASSERT_EQ(engines_->calls("decode").size(), 1u);
  std::vector<std::string> paths;
  for (const Call& c : engines_->calls("control")) {
    EXPECT_EQ(c.iid, "d0");
    paths.push_back(c.path);
  }
  EXPECT_EQ(paths, std::vector<std::string>({"GET /health", "GET /version"}));
  const std::vector<json> probes = Events("engine_probe", "d0");
  ASSERT_EQ(probes.size(), 1u);
  EXPECT_EQ(probes[0]["outcome"], "failed");
  EXPECT_EQ(probes[0]["detail"], "lifecycle validation: vllm_version is 0.30.0, pinned 0.29.1");
  EXPECT_EQ(State("d0"), PlacementState::kEjected);

  // The right build comes back: the next probe validates and readmits it.
  engines_->SetControl("d0", "/version", {200, R"({"version": "0.29.1"})", ""});
  engines_->ClearCalls();
  clock_.Advance(kInterval);
  loop_.Run(prober_->Run(TakeOne("d0", ProbeKind::kInference)));
  paths.clear();
  for (const Call& c : engines_->calls("control")) paths.push_back(c.path);
  EXPECT_EQ(paths, std::vector<std::string>(
                       {"GET /health", "GET /version", "GET /v1/models", "GET /v1/models"}));
  EXPECT_EQ(State("d0"), PlacementState::kServing);
  EXPECT_EQ(Events("engine_readmitted", "d0").at(0)["evidence"], "lifecycle");
  EXPECT_EQ(Metric("narwhal_engine_readmissions_total", {{"iid", "d0"}, {"evidence", "lifecycle"}}),
            1);
}

TEST_F(FleetProberTest, PinnedContractConnectionEjectionReadmitsOnLifecycleValidation) {
  settings_.engine_contract = router::EngineContract{};
  settings_.engine_contract->vllm_version = "0.29.1";
  Build();
  FailDecode("d1", BreakerClass::kConnection, 3, "p0");
  ASSERT_EQ(State("d1"), PlacementState::kEjected);
  engines_->SetControl("d1", "/version", {200, R"({"version": "0.28.0"})", ""});
  clock_.Advance(kInterval);
  loop_.Run(prober_->Run(TakeOne("d1", ProbeKind::kHealth)));
  EXPECT_EQ(State("d1"), PlacementState::kEjected);
  EXPECT_EQ(Events("engine_probe", "d1").at(0)["detail"], "vllm_version is 0.28.0, pinned 0.29.1");
  engines_->SetControl("d1", "/version", {200, R"({"version": "0.29.1"})", ""});
  clock_.Advance(kInterval);  // backoff: one interval times one failure
  loop_.Run(prober_->Run(TakeOne("d1", ProbeKind::kHealth)));
  EXPECT_EQ(State("d1"), PlacementState::kServing);
  EXPECT_EQ(Events("engine_readmitted", "d1").at(0)["evidence"], "lifecycle");
}

// -------------------------------------------------------- health probes

TEST_F(FleetProberTest, ConnectionEjectionWithoutContractReadmitsOnAHealthCheck) {
  Build();
  FailDecode("d1", BreakerClass::kConnection, 3, "p0");
  ASSERT_EQ(State("d1"), PlacementState::kEjected);
  EXPECT_EQ(Metric("narwhal_engine_ejections_total", {{"iid", "d1"}, {"cause", "connection"}}), 1);
  EXPECT_EQ(Events("engine_ejected", "d1").at(0)["cause"], "connection");
  engines_->SetControl("d1", "/health", {0, "", "connection refused"});
  clock_.Advance(kInterval);
  loop_.Run(prober_->Run(TakeOne("d1", ProbeKind::kHealth)));
  EXPECT_EQ(State("d1"), PlacementState::kEjected);
  EXPECT_EQ(Events("engine_probe", "d1").at(0)["detail"], "GET /health: connection refused");

  engines_->SetControl("d1", "/health", {200, "", ""});
  engines_->ClearCalls();
  clock_.Advance(kInterval);
  loop_.Run(prober_->Run(TakeOne("d1", ProbeKind::kHealth)));
  std::vector<std::string> paths;
  for (const Call& c : engines_->calls()) paths.push_back(c.kind + " " + c.path);
  // A health check is /health and the served model; no inference leg.
  EXPECT_EQ(paths, std::vector<std::string>({"control GET /health", "control GET /v1/models"}));
  EXPECT_EQ(State("d1"), PlacementState::kServing);
  EXPECT_EQ(Events("engine_readmitted", "d1").at(0)["evidence"], "health");
  EXPECT_EQ(Metric("narwhal_engine_readmissions_total", {{"iid", "d1"}, {"evidence", "health"}}),
            1);
  EXPECT_EQ(Metric("narwhal_engine_probes_total",
                   {{"iid", "d1"}, {"kind", "health"}, {"outcome", "failed"}}),
            1);
}

TEST_F(FleetProberTest, TimeoutStreakHealthProbeFailureEjectsACoveredEngine) {
  Build();
  FailDecode("d0", BreakerClass::kTimeout, 3, "p0");
  EXPECT_EQ(State("d0"), PlacementState::kServing);
  engines_->SetControl("d0", "/health", {503, "", ""});
  loop_.Run(prober_->Run(TakeOne("d0", ProbeKind::kHealth)));
  EXPECT_EQ(State("d0"), PlacementState::kEjected);
  EXPECT_EQ(Events("engine_ejected", "d0").at(0)["cause"], "health_probe");
  EXPECT_EQ(Metric("narwhal_engine_ejections_total", {{"iid", "d0"}, {"cause", "health_probe"}}),
            1);
}

// -------------------------------------------------------------- liveness

TEST_F(FleetProberTest, LivenessSweepsEjectAfterConsecutiveMisses) {
  settings_.recovery.liveness_interval_s = 5;
  Build();
  engines_->SetControl("d1", "/health", {0, "", "connection refused"});
  for (int sweep = 1; sweep <= 2; ++sweep) {
    const std::vector<ProbeTask> tasks = fleet_->control().TakeDueProbes();
    ASSERT_EQ(tasks.size(), 4u) << sweep;
    for (const ProbeTask& t : tasks) {
      EXPECT_EQ(t.kind, ProbeKind::kLiveness);
      loop_.Run(prober_->Run(t));
    }
    EXPECT_TRUE(fleet_->control().TakeDueProbes().empty());
    EXPECT_EQ(State("d1"), sweep < 2 ? PlacementState::kServing : PlacementState::kEjected);
    clock_.Advance(5);
  }
  EXPECT_EQ(Events("engine_ejected", "d1").at(0)["cause"], "liveness");
  EXPECT_EQ(Metric("narwhal_engine_ejections_total", {{"iid", "d1"}, {"cause", "liveness"}}), 1);
  EXPECT_EQ(Metric("narwhal_engine_probes_total",
                   {{"iid", "d1"}, {"kind", "liveness"}, {"outcome", "failed"}}),
            2);
  EXPECT_EQ(Metric("narwhal_engine_probes_total",
                   {{"iid", "d0"}, {"kind", "liveness"}, {"outcome", "passed"}}),
            2);
  EXPECT_EQ(Metric("narwhal_engine_breaker_streak", {{"iid", "d1"}, {"class", "liveness"}}), 2);
  // Failed sweeps are events; passing ones are only counted.
  EXPECT_EQ(Events("engine_probe", "d1").size(), 2u);
  EXPECT_TRUE(Events("engine_probe", "d0").empty());
  for (const json& e : bus_.Since(0)) {
    EXPECT_FALSE(e.value("event", "") == "engine_probe" && e.value("outcome", "") == "passed")
        << e.dump();
  }
}

TEST_F(FleetProberTest, LivenessSkipsEnginesWithLegsInFlight) {
  settings_.recovery.liveness_interval_s = 5;
  Build();
  std::optional<router::Fleet::Reservation> leg = fleet_->PickAndReserve(Phase::kDecode, {"d1"});
  ASSERT_TRUE(leg.has_value());
  std::vector<std::string> swept;
  for (const ProbeTask& t : fleet_->control().TakeDueProbes()) swept.push_back(t.iid);
  EXPECT_EQ(swept, std::vector<std::string>({"p0", "p1", "d1"}));
}

// ---------------------------------------------------------------- quarantine

TEST_F(FleetProberTest, QuarantineIsPublishedAndExpiresOnTheMonitorsPass) {
  settings_.recovery.failure_quarantine_s = 1;
  Build();
  FailDecode("d0", BreakerClass::kStream, 1, "p0");
  EXPECT_EQ(State("d0"), PlacementState::kQuarantined);
  EXPECT_EQ(Metric("narwhal_engine_quarantined", {{"iid", "d0"}}), 1);
  EXPECT_EQ(Metric("narwhal_engine_held", {{"iid", "d0"}, {"kind", "timed"}}), 1);
  std::optional<router::Fleet::Reservation> leg = fleet_->PickAndReserve(Phase::kDecode, {"d1"});
  EXPECT_FALSE(leg.has_value());  // d0 takes nothing
  clock_.Advance(1);
  EXPECT_TRUE(fleet_->control().TakeDueProbes().empty());
  EXPECT_EQ(Events("engine_hold_ended", "d0").at(0)["cause"], "expired");
  EXPECT_EQ(Metric("narwhal_engine_quarantined", {{"iid", "d0"}}), 0);
  leg = fleet_->PickAndReserve(Phase::kDecode, {"d1"});
  ASSERT_TRUE(leg.has_value());
  EXPECT_EQ(leg->target().iid, "d0");
}

TEST_F(FleetProberTest, B15_StreamQuarantineIsLiftedByAVerificationNeverByAHealthCheck) {
  settings_.recovery.failure_quarantine_s = 15;
  settings_.recovery.liveness_interval_s = 5;
  Build();
  // d0 went silent on a client's decode leg; its /health still answers 200.
  FailDecode("d0", BreakerClass::kStream, 1, "p1");
  ASSERT_EQ(State("d0"), PlacementState::kQuarantined);
  DecodeScript silent;
  silent.silent = true;
  engines_->SetDecode("d0", silent);

  // The sweep: health checks for the others, an inference verification
  // (a prefill on the recorded producer, a decode on d0) for d0.
  std::vector<ProbeTask> tasks = fleet_->control().TakeDueProbes();
  ASSERT_EQ(tasks.size(), 4u);
  for (const ProbeTask& t : tasks) {
    const std::string iid = t.iid;
    EXPECT_EQ(t.kind, iid == "d0" ? ProbeKind::kInference : ProbeKind::kLiveness) << iid;
    loop_.Run(prober_->Run(t));
  }
  EXPECT_EQ(State("d0"), PlacementState::kQuarantined);
  EXPECT_TRUE(Events("engine_hold_ended", "d0").empty());
  for (const Call& c : engines_->calls("control")) EXPECT_NE(c.iid, "d0") << c.path;
  const std::vector<Call> decodes = engines_->calls("decode");
  ASSERT_EQ(decodes.size(), 1u);
  EXPECT_EQ(decodes[0].iid, "d0");
  EXPECT_EQ(decodes[0].handoff_producer, "p1");
  EXPECT_EQ(Metric("narwhal_engine_probes_total",
                   {{"iid", "d0"}, {"kind", "inference"}, {"outcome", "failed"}}),
            1);

  // Once d0 streams again, the next sweep's verification ends it early.
  engines_->SetDecode("d0", DecodeScript{});
  clock_.Advance(5);
  tasks = fleet_->control().TakeDueProbes();
  ASSERT_EQ(tasks.size(), 4u);
  for (const ProbeTask& t : tasks) loop_.Run(prober_->Run(t));
  EXPECT_EQ(State("d0"), PlacementState::kServing);
  const std::vector<json> ended = Events("engine_hold_ended", "d0");
  ASSERT_EQ(ended.size(), 1u);
  EXPECT_EQ(ended[0]["hold_kind"], "timed");
  EXPECT_EQ(ended[0]["cause"], "verification");
  EXPECT_EQ(Metric("narwhal_engine_quarantined", {{"iid", "d0"}}), 0);
}

TEST_F(FleetProberTest, TimeoutQuarantineStillEndsOnAHealthySweep) {
  settings_.recovery.failure_quarantine_s = 15;
  settings_.recovery.liveness_interval_s = 5;
  Build();
  FailDecode("d0", BreakerClass::kTimeout, 1, "p1");
  ASSERT_EQ(State("d0"), PlacementState::kQuarantined);
  for (const ProbeTask& t : fleet_->control().TakeDueProbes()) {
    EXPECT_EQ(t.kind, ProbeKind::kLiveness);
    loop_.Run(prober_->Run(t));
  }
  EXPECT_EQ(State("d0"), PlacementState::kServing);
  EXPECT_EQ(Events("engine_hold_ended", "d0").at(0)["cause"], "health");
}

// ---------------------------------------------------------------- whole wave

TEST_F(FleetProberTest, WholeWaveEjectionMakesTheFleetUnready) {
  settings_.recovery.engine_restart_policy = router::RestartPolicy::kWholeWave;
  settings_.recovery.liveness_interval_s = 5;
  Build();
  FailDecode("d1", BreakerClass::kConnection, 3, "p0");
  std::string why;
  EXPECT_FALSE(fleet_->Ready(&why));
  EXPECT_EQ(why, "whole-wave hold: engine d1 is ejected (connection)");
  EXPECT_FALSE(fleet_->PickAndReserve(Phase::kPrefill, {}).has_value());
  EXPECT_FALSE(fleet_->PickAndReserve(Phase::kDecode, {}).has_value());
  EXPECT_EQ(fleet_->admin().Snapshot()[0].explanation, why);
  ASSERT_TRUE(fleet_->admin().Readmit("d1", "health").ok());
  // Readmitted d1 passed a check; readiness waits for the prefill role too.
  EXPECT_FALSE(fleet_->Ready(&why));
  fleet_->control().RecordSuccess("p0", router::Success::kHealth);
  EXPECT_TRUE(fleet_->Ready(&why)) << why;
  EXPECT_TRUE(fleet_->PickAndReserve(Phase::kPrefill, {}).has_value());
}

// A probe that ends (or starts) a whole-wave hold moves every engine's
// in_placement gauge at once, not only the probed engine's.
TEST_F(FleetProberTest, WholeWaveGaugesFollowTheProbeThatEndsIt) {
  settings_.recovery.engine_restart_policy = router::RestartPolicy::kWholeWave;
  Build();
  FailDecode("d1", BreakerClass::kConnection, 3, "p0");
  ASSERT_EQ(State("d1"), PlacementState::kEjected);
  for (const char* iid : {"p0", "p1", "d0", "d1"}) {
    EXPECT_EQ(Metric("narwhal_engine_in_placement", {{"iid", iid}}), 0) << iid;
  }
  clock_.Advance(kInterval);
  loop_.Run(prober_->Run(TakeOne("d1", ProbeKind::kHealth)));
  ASSERT_EQ(State("d1"), PlacementState::kServing);
  for (const char* iid : {"p0", "p1", "d0", "d1"}) {
    EXPECT_EQ(Metric("narwhal_engine_in_placement", {{"iid", iid}}), 1) << iid;
  }
}

// ------------------------------------------------------------- the monitor

// The monitor is a coroutine on the control loop, ticking on the fake clock:
// it runs nothing until the clock moves, and a stop ends it at once.
TEST_F(FleetProberTest, MonitorRunsDueProbesOnTheClockAndCanBeRestarted) {
  Build();
  router::FleetMonitor monitor(fleet_->control(), *prober_, loop_.executor(),
                               std::chrono::milliseconds(5));
  const auto tick_until_serving = [&](const std::string& iid) {
    for (int k = 0; k < 200 && State(iid) != PlacementState::kServing; ++k) {
      clock_.Advance(0.005);
      loop_.Drain();
    }
  };
  monitor.Start();
  loop_.Drain();  // its first pass found nothing due
  FailDecode("d0", BreakerClass::kStream, 3, "p1");
  loop_.Drain();
  loop_.Drain();
  EXPECT_NE(State("d0"), PlacementState::kServing) << "the monitor ran before the clock moved";
  tick_until_serving("d0");
  EXPECT_EQ(State("d0"), PlacementState::kServing);
  monitor.Stop();
  EXPECT_EQ(monitor.running(), 0u);
  ASSERT_EQ(Events("engine_probe", "d0").size(), 1u);

  // Stopped, it runs nothing however the clock moves.
  FailDecode("d1", BreakerClass::kStream, 3, "p0");
  for (int k = 0; k < 20; ++k) {
    clock_.Advance(0.005);
    loop_.Drain();
  }
  EXPECT_NE(State("d1"), PlacementState::kServing);
  EXPECT_TRUE(Events("engine_probe", "d1").empty());

  // Started again after a stop, it runs probes again.
  monitor.Start();
  tick_until_serving("d1");
  EXPECT_EQ(State("d1"), PlacementState::kServing);
  monitor.Stop();
  EXPECT_EQ(Events("engine_probe", "d1").size(), 1u);
}

}  // namespace
}  // namespace narwhal::prober_test
