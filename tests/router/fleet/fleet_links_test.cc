// Per-link health through Fleet and Prober (router/fleet/link_book.h) with a
// scripted engine client and a manual clock: attribution of crossed-decode
// evidence to the link, decode placement that avoids a held link (and uses
// it as a last resort) while both engines stay in placement, the link probe
// and readmission, and what each change publishes — narwhal_link_held, the
// journal's event rows and EventBus events.
#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engines/api.h"
#include "engines/engine_failure.h"
#include "router/common/journal.h"
#include "router/common/metrics.h"
#include "router/common/settings.h"
#include "router/fleet/event_bus.h"
#include "router/fleet/fleet.h"
#include "router/fleet/link_book.h"
#include "router/fleet/prober.h"
#include "tests/fakes/control_loop.h"
#include "tests/fakes/fake_clock.h"
#include "tests/fakes/scripted_engines.h"

namespace narwhal::breaker_test {
namespace {

using engines::BreakerClass;
using engines::EngineFailure;
using engines::FailureReason;
using engines::Phase;
using json = nlohmann::json;
using router::LinkProbeTask;
using router::LinkState;
using router::PlacementState;
using router::Role;
using router::Success;
using testing::Call;
using testing::DecodeScript;
using testing::Refused;
using testing::ScriptedEngines;

constexpr double kFirstToken = 0.75;
constexpr double kInterval = 2.0;

class FleetLinksTest : public ::testing::Test {
 protected:
  FleetLinksTest() : metrics_(registry_) {
    settings_.model = "m";
    settings_.engines = {{"p0", "http://p0.test:8000", Role::kPrefill},
                         {"p1", "http://p1.test:8000", Role::kPrefill},
                         {"d0", "http://d0.test:8000", Role::kDecode},
                         {"d1", "http://d1.test:8000", Role::kDecode}};
    settings_.engine.first_token_timeout_s = kFirstToken;
    settings_.recovery.eject_after = 3;
    settings_.recovery.readmit_interval_s = kInterval;
    settings_.recovery.liveness_interval_s = 0;
    settings_.links.hold_after = 3;
    settings_.links.window_s = 60;
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    journal_path_ = ::testing::TempDir() + "links_" + info->name() + ".jsonl";
    std::remove(journal_path_.c_str());
    auto journal = router::Journal::Open(journal_path_);
    EXPECT_TRUE(journal.ok()) << journal.status();
    journal_ = std::move(*journal);
    fleet_ = std::make_unique<router::Fleet>(settings_, clock_, &metrics_, journal_.get(), &bus_);
    engines_ = std::make_unique<ScriptedEngines>(clock_, &clock_, kFirstToken);
    prober_ = std::make_unique<router::Prober>(*engines_, fleet_->control(), clock_);
  }

  // A client decode of a handoff from `producer` on `consumer` that failed
  // with engine evidence against the consumer (what the router reports).
  void FailDecode(const std::string& producer, const std::string& consumer) {
    EngineFailure f;
    f.phase = Phase::kDecode;
    f.reason = FailureReason::kEngineError;
    f.breaker_class = BreakerClass::kInferenceStatus;
    f.iid = consumer;
    f.evidence_iid = consumer;
    f.cause = engines::FailureCause::kStreamError;
    f.engine_status = 500;
    f.detail = "engine error 500: KV pull failed";
    fleet_->control().RecordFailure(f, producer);
    clock_.Advance(0.1);
  }
  // A client decode that reached [DONE] (what the router reports).
  void Done(const std::string& producer, const std::string& consumer) {
    fleet_->control().RecordSuccess(producer, Success::kPrefillHandoff);
    fleet_->control().RecordSuccess(consumer, Success::kDecodeDone);
    fleet_->control().RecordLinkSuccess(producer, consumer);
    clock_.Advance(0.1);
  }

  // The traffic of a fleet where d0 fails every handoff of p0 and works
  // otherwise, interleaved as placement spreads it.
  void ConcentratedFailures(int rounds) {
    for (int r = 0; r < rounds; ++r) {
      FailDecode("p0", "d0");
      Done("p0", "d1");
      Done("p1", "d0");
      Done("p1", "d1");
    }
  }

  router::LinkSnapshot LinkOf(const std::string& producer, const std::string& consumer) {
    for (const router::LinkSnapshot& l : fleet_->admin().Links()) {
      if (l.producer == producer && l.consumer == consumer) return l;
    }
    ADD_FAILURE() << "no link " << producer << "->" << consumer;
    return {};
  }

  PlacementState State(const std::string& iid) { return fleet_->admin().Snapshot(iid)->state; }

  // The value of one series, or -1 when it does not exist.
  double Metric(const std::string& family, const std::map<std::string, std::string>& labels) {
    for (const prometheus::MetricFamily& f : registry_.Collect()) {
      if (f.name != family) continue;
      for (const prometheus::ClientMetric& m : f.metric) {
        std::map<std::string, std::string> got;
        for (const prometheus::ClientMetric::Label& l : m.label) got[l.name] = l.value;
        if (got == labels) return m.gauge.value;
      }
    }
    return -1;
  }
  double Held(const std::string& producer, const std::string& consumer) {
    return Metric("narwhal_link_held", {{"producer", producer}, {"consumer", consumer}});
  }

  std::vector<json> JournalEvents(const std::string& kind) {
    journal_->Flush();
    std::vector<json> rows;
    std::ifstream in(journal_path_);
    for (std::string line; std::getline(in, line);) {
      if (line.empty()) continue;
      json row = json::parse(line);
      if (row.value("event", "") == kind) rows.push_back(row);
    }
    return rows;
  }

  // Which consumer decode placement picks for a handoff from `producer`.
  std::string PickConsumer(const std::string& producer,
                           const std::vector<std::string>& excluded = {}) {
    std::optional<router::Fleet::Reservation> r =
        fleet_->PickAndReserve(Phase::kDecode, excluded, producer);
    return r ? r->target().iid : "";
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

// A link is kept once a crossed decode used it, and exported (1) only
// while it is held: a fleet of 1,024 engines has a million pairs.
TEST_F(FleetLinksTest, LinksAreKeptOnceUsedAndExportedOnlyWhileHeld) {
  EXPECT_TRUE(fleet_->admin().Links().empty());
  for (const std::string p : {"p0", "p1"}) {
    for (const std::string c : {"d0", "d1"}) EXPECT_EQ(Held(p, c), -1) << p << "->" << c;
  }
  ConcentratedFailures(3);
  EXPECT_EQ(fleet_->admin().Links().size(), 4u);
  EXPECT_EQ(Held("p0", "d0"), 1);
  EXPECT_EQ(Held("p0", "d1"), -1);
  EXPECT_EQ(Held("d0", "p0"), -1);  // not a link
}

TEST_F(FleetLinksTest, FailuresConcentratedOnOneLinkHoldItAndKeepBothEnginesInPlacement) {
  ConcentratedFailures(2);
  EXPECT_EQ(LinkOf("p0", "d0").state, LinkState::kServing);
  EXPECT_EQ(LinkOf("p0", "d0").streak, 2);
  ConcentratedFailures(1);
  const router::LinkSnapshot l = LinkOf("p0", "d0");
  EXPECT_EQ(l.state, LinkState::kHeld);
  EXPECT_EQ(l.failures, 3);
  EXPECT_EQ(l.successes, 0);
  EXPECT_NE(l.last_failure.find("KV pull failed"), std::string::npos) << l.last_failure;
  EXPECT_NEAR(l.since, clock_.WallNow() - 0.4, 0.01);  // the third failure, 4 steps ago
  EXPECT_EQ(Held("p0", "d0"), 1);
  EXPECT_EQ(Held("p0", "d1"), -1);
  EXPECT_EQ(Held("p1", "d0"), -1);
  EXPECT_EQ(LinkOf("p1", "d0").successes, 3);
  // Node breakers: the interleaved successes kept both engines serving.
  EXPECT_EQ(State("p0"), PlacementState::kServing);
  EXPECT_EQ(State("d0"), PlacementState::kServing);
  EXPECT_EQ(Metric("narwhal_engine_in_placement", {{"iid", "d0"}}), 1);

  // Events: journal row and bus event, with the producer and the consumer.
  const std::vector<json> rows = JournalEvents("link_held");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].value("producer", ""), "p0");
  EXPECT_EQ(rows[0].value("consumer", ""), "d0");
  EXPECT_EQ(rows[0].value("iid", ""), "d0");
  EXPECT_NE(rows[0].value("cause", "").find("3 consecutive"), std::string::npos);
  int bus_held = 0;
  for (const json& e : bus_.Since(0)) bus_held += e.value("event", "") == "link_held";
  EXPECT_EQ(bus_held, 1);
}

TEST_F(FleetLinksTest, DecodePlacementAvoidsAHeldLinkAndUsesItOnlyAsALastResort) {
  ConcentratedFailures(3);
  ASSERT_EQ(LinkOf("p0", "d0").state, LinkState::kHeld);
  // Whatever the rotation, a handoff from p0 goes to d1, one from p1 to both.
  std::map<std::string, int> from_p0;
  std::map<std::string, int> from_p1;
  for (int k = 0; k < 6; ++k) ++from_p0[PickConsumer("p0")];
  for (int k = 0; k < 6; ++k) ++from_p1[PickConsumer("p1")];
  EXPECT_EQ(from_p0["d1"], 6);
  EXPECT_EQ(from_p0["d0"], 0);
  EXPECT_GT(from_p1["d0"], 0);
  EXPECT_GT(from_p1["d1"], 0);
  // With d1 excluded, the held link is used rather than refusing.
  EXPECT_EQ(PickConsumer("p0", {"d1"}), "d0");
  EXPECT_TRUE(fleet_->CanPlace(Phase::kDecode, {"d1"}));
}

TEST_F(FleetLinksTest, AProducerFailingWithEveryConsumerHoldsNoLink) {
  for (int r = 0; r < 4; ++r) {
    FailDecode("p0", "d0");
    FailDecode("p0", "d1");
    Done("p1", "d0");
    Done("p1", "d1");
  }
  for (const router::LinkSnapshot& l : fleet_->admin().Links()) {
    EXPECT_EQ(l.state, LinkState::kServing) << l.producer << "->" << l.consumer;
  }
  EXPECT_EQ(LinkOf("p0", "d0").failures, 4);
  EXPECT_EQ(Held("p0", "d0"), -1);
  EXPECT_EQ(Held("p0", "d1"), -1);
  EXPECT_TRUE(JournalEvents("link_held").empty());
}

TEST_F(FleetLinksTest, OnlyCrossedDecodeEvidenceCountsForALink) {
  Done("p0", "d1");
  Done("p1", "d0");
  for (int k = 0; k < 4; ++k) {
    EngineFailure f;  // a prefill failure: the producer's alone
    f.phase = Phase::kPrefill;
    f.reason = FailureReason::kEngineError;
    f.breaker_class = BreakerClass::kInferenceStatus;
    f.iid = "p0";
    f.evidence_iid = "p0";
    fleet_->control().RecordFailure(f, "p0");
    EngineFailure g;  // the router's own verdict: no evidence at all
    g.phase = Phase::kDecode;
    g.reason = FailureReason::kHandoffExpired;
    g.breaker_class = BreakerClass::kNone;
    g.iid = "d0";
    fleet_->control().RecordFailure(g, "p0");
  }
  // No crossed decode went over p0->d0: there is no link to speak of.
  for (const router::LinkSnapshot& l : fleet_->admin().Links()) {
    EXPECT_FALSE(l.producer == "p0" && l.consumer == "d0");
    EXPECT_EQ(l.failures, 0) << l.producer << "->" << l.consumer;
  }
}

TEST_F(FleetLinksTest, ALinkProbeOverTheLinkReadmitsIt) {
  ConcentratedFailures(3);
  ASSERT_EQ(LinkOf("p0", "d0").state, LinkState::kHeld);
  // d0 still fails p0's handoffs: the probe fails and the link stays held.
  DecodeScript silent;
  silent.silent = true;
  engines_->SetDecode("d0", silent);
  std::vector<LinkProbeTask> tasks = fleet_->control().TakeDueLinkProbes();
  ASSERT_EQ(tasks.size(), 1u);
  engines_->ClearCalls();
  loop_.Run(prober_->RunLink(tasks[0]));
  const std::vector<Call> prefills = engines_->calls("prefill");
  const std::vector<Call> decodes = engines_->calls("decode");
  ASSERT_EQ(prefills.size(), 1u);
  EXPECT_EQ(prefills[0].iid, "p0");
  ASSERT_EQ(decodes.size(), 1u);
  EXPECT_EQ(decodes[0].iid, "d0");
  EXPECT_EQ(decodes[0].handoff_producer, "p0");
  EXPECT_EQ(LinkOf("p0", "d0").state, LinkState::kHeld);
  EXPECT_EQ(LinkOf("p0", "d0").probe_failures, 1);
  EXPECT_TRUE(fleet_->control().TakeDueLinkProbes().empty());  // backed off
  EXPECT_EQ(Held("p0", "d0"), 1);

  // Fixed: the next probe passes and the link is back.
  engines_->SetDecode("d0", DecodeScript{});
  clock_.Advance(kInterval);
  tasks = fleet_->control().TakeDueLinkProbes();
  ASSERT_EQ(tasks.size(), 1u);
  loop_.Run(prober_->RunLink(tasks[0]));
  const router::LinkSnapshot l = LinkOf("p0", "d0");
  EXPECT_EQ(l.state, LinkState::kServing);
  EXPECT_EQ(l.cause, "probe passed");
  EXPECT_EQ(Held("p0", "d0"), -1);
  EXPECT_EQ(JournalEvents("link_readmitted").size(), 1u);
  EXPECT_EQ(JournalEvents("link_probe").size(), 2u);
  EXPECT_EQ(PickConsumer("p0", {"d1"}), "d0");
}

TEST_F(FleetLinksTest, AProbeWhoseProducerFailsIsInconclusive) {
  ConcentratedFailures(3);
  engines_->SetPrefill("p0", {Refused()});
  std::vector<LinkProbeTask> tasks = fleet_->control().TakeDueLinkProbes();
  ASSERT_EQ(tasks.size(), 1u);
  const router::ProbeResult r = loop_.Run(prober_->ProbeLink(tasks[0]));
  EXPECT_EQ(r.outcome, router::ProbeOutcome::kInconclusive);
  fleet_->control().CompleteLinkProbe(tasks[0], router::LinkProbeOutcome::kInconclusive, r.detail);
  EXPECT_EQ(LinkOf("p0", "d0").probe_failures, 0);
  EXPECT_EQ(LinkOf("p0", "d0").state, LinkState::kHeld);
  EXPECT_TRUE(engines_->calls("decode").empty());
}

// ------------------------------------------------- silent recompute (kv_recompute.h)

class FleetRecomputeTest : public FleetLinksTest {
 protected:
  double Suspected(const std::string& iid) {
    for (const prometheus::MetricFamily& f : registry_.Collect()) {
      if (f.name != "narwhal_kv_recompute_suspected_total") continue;
      for (const prometheus::ClientMetric& m : f.metric) {
        if (m.label.size() == 1 && m.label[0].value == iid) return m.counter.value;
      }
    }
    return -1;
  }
  // d0's /metrics reports `value` failed transfers; every due scrape runs.
  void ScrapeAll(double value) {
    engines::ControlResponse r;
    r.status = 200;
    r.body =
        "# TYPE vllm:nixl_num_failed_transfers_total counter\n"
        "vllm:nixl_num_failed_transfers_total{engine=\"0\",model_name=\"m\"} " +
        std::to_string(value) + "\n";
    engines_->SetControl("d0", "/metrics", r);
    for (const router::RecomputeScrapeTask& t : fleet_->control().TakeDueRecomputeScrapes()) {
      loop_.Run(prober_->ScrapeRecompute(t));
    }
  }
  // A crossed decode p->c that reached [DONE] with no usage evidence.
  void QuietDone(const std::string& producer, const std::string& consumer) {
    fleet_->control().RecomputeDecodeStarted(producer, consumer);
    fleet_->control().RecomputeDecodeEnded(producer, consumer, false, false, "");
    Done(producer, consumer);
  }
};

TEST_F(FleetRecomputeTest, EveryConsumerIsExportedAtZeroFromTheStart) {
  EXPECT_EQ(Suspected("d0"), 0);
  EXPECT_EQ(Suspected("d1"), 0);
  EXPECT_EQ(Suspected("p0"), -1);  // not a consumer
}

TEST_F(FleetRecomputeTest, ScrapesRunOnTheMonitorCadenceOnFakeTime) {
  EXPECT_EQ(fleet_->control().TakeDueRecomputeScrapes().size(), 2u);  // d0, d1
  EXPECT_TRUE(fleet_->control().TakeDueRecomputeScrapes().empty());   // running
  for (const std::string iid : {"d0", "d1"}) {
    fleet_->control().CompleteRecomputeScrape({iid}, 0);
  }
  EXPECT_TRUE(fleet_->control().TakeDueRecomputeScrapes().empty());  // not due yet
  clock_.Advance(router::FleetControl::kRecomputeScrapeIntervalS);
  EXPECT_EQ(fleet_->control().TakeDueRecomputeScrapes().size(), 2u);
}

TEST_F(FleetRecomputeTest, ACounterIncreaseIsCountedAndRepeatedOnesHoldTheLink) {
  ScrapeAll(5);  // the baseline: failures from before the router started
  EXPECT_EQ(Suspected("d0"), 0);
  for (int k = 1; k <= 3; ++k) {
    QuietDone("p0", "d0");  // a decode whose consumer did not use the KV cache
    Done("p0", "d1");
    Done("p1", "d1");
    clock_.Advance(router::FleetControl::kRecomputeScrapeIntervalS);
    ScrapeAll(5 + k);
    EXPECT_EQ(Suspected("d0"), k);
    QuietDone("p1", "d0");  // d0 decodes p1's handoffs fine
    clock_.Advance(router::FleetControl::kRecomputeScrapeIntervalS);
    ScrapeAll(5 + k);
  }
  EXPECT_EQ(Suspected("d1"), 0);
  const router::LinkSnapshot l = LinkOf("p0", "d0");
  EXPECT_EQ(l.state, LinkState::kHeld);
  EXPECT_EQ(l.failures, 3);
  EXPECT_NE(l.last_failure.find("vllm:nixl_num_failed_transfers_total"), std::string::npos)
      << l.last_failure;
  EXPECT_EQ(Held("p0", "d0"), 1);
  EXPECT_EQ(LinkOf("p1", "d0").state, LinkState::kServing);
  EXPECT_EQ(State("d0"), PlacementState::kServing);
}

TEST_F(FleetRecomputeTest, UsageEvidenceIsCountedOnceWhenTheCounterRisesToo) {
  ScrapeAll(0);
  fleet_->control().RecomputeDecodeStarted("p0", "d0");
  fleet_->control().RecomputeDecodeEnded("p0", "d0", true, false,
                                         "cached_tokens 0 of 400 prompt tokens");
  EXPECT_EQ(Suspected("d0"), 1);
  EXPECT_EQ(LinkOf("p0", "d0").failures, 1);
  EXPECT_NE(LinkOf("p0", "d0").last_failure.find("cached_tokens 0 of 400"), std::string::npos);
  clock_.Advance(router::FleetControl::kRecomputeScrapeIntervalS);
  ScrapeAll(1);  // the same failed transfer, seen on the engine
  EXPECT_EQ(Suspected("d0"), 1);
  EXPECT_EQ(LinkOf("p0", "d0").failures, 1);
}

}  // namespace
}  // namespace narwhal::breaker_test
