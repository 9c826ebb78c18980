// Typed fleet events (router/fleet/fleet_event.h): each kind serializes to its
// wire name and fields, the log level follows the event, and counting
// (router/fleet/fleet_event_counts.h) feeds both the Prometheus counters and the
// per-engine counts the admin API reports — once per published event.
#include "router/fleet/fleet_event.h"

#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "router/common/metrics.h"
#include "router/common/settings.h"
#include "router/fleet/event_bus.h"
#include "router/fleet/fleet.h"
#include "router/fleet/fleet_event_counts.h"
#include "tests/fakes/fake_clock.h"

namespace narwhal::router {
namespace {

using json = nlohmann::json;

double Metric(prometheus::Registry& registry, const std::string& family,
              const std::map<std::string, std::string>& labels) {
  for (const prometheus::MetricFamily& f : registry.Collect()) {
    if (f.name != family) continue;
    for (const prometheus::ClientMetric& m : f.metric) {
      std::map<std::string, std::string> got;
      for (const prometheus::ClientMetric::Label& l : m.label) got[l.name] = l.value;
      if (got == labels) return m.counter.value;
    }
  }
  return -1;
}

TEST(FleetEventTest, EveryKindSerializesToItsWireName) {
  const std::map<FleetEventKind, std::string> want = {
      {FleetEventKind::kEngineHoldStarted, "engine_hold_started"},
      {FleetEventKind::kEngineHoldEnded, "engine_hold_ended"},
      {FleetEventKind::kEngineHoldSuppressed, "engine_hold_suppressed"},
      {FleetEventKind::kEngineEjected, "engine_ejected"},
      {FleetEventKind::kEngineReadmitted, "engine_readmitted"},
      {FleetEventKind::kEngineProbe, "engine_probe"},
      {FleetEventKind::kEngineDrained, "engine_drained"},
      {FleetEventKind::kEngineReadmitRefused, "engine_readmit_refused"},
      {FleetEventKind::kLinkHeld, "link_held"},
      {FleetEventKind::kLinkProbe, "link_probe"},
      {FleetEventKind::kLinkReadmitted, "link_readmitted"},
      {FleetEventKind::kPreflight, "preflight"},
      {FleetEventKind::kEngineJoined, "engine_joined"},
      {FleetEventKind::kEngineJoinFailed, "engine_join_failed"},
      {FleetEventKind::kEngineLeft, "engine_left"},
  };
  std::set<std::string> seen;
  for (FleetEventKind kind : kAllFleetEventKinds) {
    ASSERT_TRUE(want.count(kind)) << static_cast<int>(kind);
    FleetEvent e;
    e.kind = kind;
    e.iid = "d0";
    if (kind == FleetEventKind::kPreflight) e.preflight = PreflightSummary{};
    EXPECT_EQ(FleetEventKindName(kind), want.at(kind));
    EXPECT_EQ(FleetEventJson(e, 1.5)["event"], want.at(kind));
    seen.insert(std::string(FleetEventKindName(kind)));
  }
  EXPECT_EQ(seen.size(), want.size());
  EXPECT_EQ(HoldKindName(HoldKind::kTimed), "timed");
  EXPECT_EQ(HoldKindName(HoldKind::kInference), "inference");
  EXPECT_EQ(HoldKindName(HoldKind::kNone), "");
}

TEST(FleetEventTest, BreakerEventCarriesItsNonEmptyFields) {
  BreakerEvent b;
  b.kind = FleetEventKind::kEngineProbe;
  b.iid = "d0";
  b.probe_kind = ProbeKind::kInference;
  b.outcome = ProbeOutcome::kProducerFailed;
  b.producer = "p1";
  b.detail = "prefill failed";
  EXPECT_EQ(FleetEventJson(FromBreakerEvent(b), 7), json({{"event", "engine_probe"},
                                                          {"at", 7},
                                                          {"iid", "d0"},
                                                          {"probe_kind", "inference"},
                                                          {"outcome", "producer_failed"},
                                                          {"producer", "p1"},
                                                          {"detail", "prefill failed"}}));

  BreakerEvent hold;
  hold.kind = FleetEventKind::kEngineHoldEnded;
  hold.iid = "p0";
  hold.hold_kind = HoldKind::kTimed;
  hold.cause = "expired";
  EXPECT_EQ(FleetEventJson(FromBreakerEvent(hold), 2), json({{"event", "engine_hold_ended"},
                                                             {"at", 2},
                                                             {"iid", "p0"},
                                                             {"hold_kind", "timed"},
                                                             {"cause", "expired"}}));
}

TEST(FleetEventTest, LinkEventNamesBothEndsAndTheConsumerAsIid) {
  LinkEvent l;
  l.kind = FleetEventKind::kLinkProbe;
  l.producer = "p0";
  l.consumer = "d1";
  l.outcome = LinkProbeOutcome::kFailed;
  l.detail = "stream ended";
  const FleetEvent e = FromLinkEvent(l);
  EXPECT_EQ(FleetEventJson(e, 3), json({{"event", "link_probe"},
                                        {"at", 3},
                                        {"iid", "d1"},
                                        {"producer", "p0"},
                                        {"consumer", "d1"},
                                        {"outcome", "failed"},
                                        {"detail", "stream ended"}}));
  EXPECT_EQ(FleetEventLogLevel(e), LogLevel::kWarning);
}

TEST(FleetEventTest, RefusedReadmissionAlwaysCarriesItsDetail) {
  FleetEvent e;
  e.kind = FleetEventKind::kEngineReadmitRefused;
  e.iid = "d0";
  e.cause = "operator";
  e.probe_kind = ProbeKind::kHealth;
  e.outcome = ProbeOutcome::kFailed;
  EXPECT_EQ(FleetEventJson(e, 4), json({{"event", "engine_readmit_refused"},
                                        {"at", 4},
                                        {"iid", "d0"},
                                        {"cause", "operator"},
                                        {"probe_kind", "health"},
                                        {"outcome", "failed"},
                                        {"detail", ""}}));
}

TEST(FleetEventTest, PreflightEventSummarizesTheReport) {
  PreflightReport r;
  r.passed = false;
  r.pairs = PairMode::kRing;
  r.duration_s = 1.25;
  r.gates = {{"reach", true, false, "", 0},
             {"model", false, false, "no model m", 0},
             {"consume", true, true, "", 0}};
  PreflightPair ok;
  ok.outcome = "passed";
  PreflightPair bad;
  bad.outcome = "failed";
  r.transfers = {ok, bad};
  const FleetEvent e = PreflightEvent(r, "admin");
  EXPECT_EQ(FleetEventJson(e, 5),
            json({{"event", "preflight"},
                  {"at", 5},
                  {"outcome", "failed"},
                  {"trigger", "admin"},
                  {"pairs", "ring"},
                  {"duration_s", 1.25},
                  {"gates", {{"reach", "passed"}, {"model", "failed"}, {"consume", "skipped"}}},
                  {"transfers", 2},
                  {"transfers_passed", 1},
                  {"detail", "gate model failed: no model m"}}));
  EXPECT_EQ(FleetEventLogLevel(e), LogLevel::kWarning);
}

TEST(FleetEventTest, LogLevelFollowsTheEvent) {
  FleetEvent sweep;
  sweep.kind = FleetEventKind::kEngineProbe;
  sweep.probe_kind = ProbeKind::kLiveness;
  sweep.outcome = ProbeOutcome::kPassed;
  EXPECT_EQ(FleetEventLogLevel(sweep), LogLevel::kDebug);
  sweep.probe_kind = ProbeKind::kHealth;
  EXPECT_EQ(FleetEventLogLevel(sweep), LogLevel::kInfo);
  sweep.outcome = ProbeOutcome::kFailed;
  EXPECT_EQ(FleetEventLogLevel(sweep), LogLevel::kWarning);
  FleetEvent ejected;
  ejected.kind = FleetEventKind::kEngineEjected;
  EXPECT_EQ(FleetEventLogLevel(ejected), LogLevel::kWarning);
  FleetEvent ended;
  ended.kind = FleetEventKind::kEngineHoldEnded;
  EXPECT_EQ(FleetEventLogLevel(ended), LogLevel::kInfo);
}

TEST(FleetEventCountsTest, CountingFeedsPrometheusAndTheAdminCounts) {
  prometheus::Registry registry;
  Metrics metrics(registry);
  FleetEventCounts counts(&metrics);
  FleetEvent probe;
  probe.kind = FleetEventKind::kEngineProbe;
  probe.iid = "d0";
  probe.probe_kind = ProbeKind::kInference;
  probe.outcome = ProbeOutcome::kFailed;
  counts.Count(probe);
  probe.outcome = ProbeOutcome::kProducerFailed;  // an attempt: metric only
  counts.Count(probe);
  FleetEvent ejected;
  ejected.kind = FleetEventKind::kEngineEjected;
  ejected.iid = "d0";
  ejected.cause = "inference_probe";
  counts.Count(ejected);
  FleetEvent readmitted;
  readmitted.kind = FleetEventKind::kEngineReadmitted;
  readmitted.iid = "d0";
  readmitted.evidence = "verification";
  counts.Count(readmitted);
  FleetEvent hold;
  hold.kind = FleetEventKind::kEngineHoldStarted;
  hold.iid = "d0";
  counts.Count(hold);
  FleetEvent refused;  // not counted anywhere
  refused.kind = FleetEventKind::kEngineReadmitRefused;
  refused.iid = "d0";
  refused.probe_kind = ProbeKind::kHealth;
  refused.outcome = ProbeOutcome::kFailed;
  counts.Count(refused);

  EXPECT_EQ(Metric(registry, "narwhal_engine_probes_total",
                   {{"iid", "d0"}, {"kind", "inference"}, {"outcome", "failed"}}),
            1);
  EXPECT_EQ(Metric(registry, "narwhal_engine_probes_total",
                   {{"iid", "d0"}, {"kind", "inference"}, {"outcome", "producer_failed"}}),
            1);
  EXPECT_EQ(Metric(registry, "narwhal_engine_probes_total",
                   {{"iid", "d0"}, {"kind", "health"}, {"outcome", "failed"}}),
            -1);
  EXPECT_EQ(Metric(registry, "narwhal_engine_ejections_total",
                   {{"iid", "d0"}, {"cause", "inference_probe"}}),
            1);
  EXPECT_EQ(Metric(registry, "narwhal_engine_readmissions_total",
                   {{"iid", "d0"}, {"evidence", "verification"}}),
            1);
  const std::map<std::string, EngineEventCounts> engines = counts.Engines();
  ASSERT_EQ(engines.count("d0"), 1u);
  const EngineEventCounts& c = engines.at("d0");
  EXPECT_EQ(c.probes, 1);
  EXPECT_EQ(c.probes_failed, 1);
  EXPECT_EQ(c.ejections, 1);
  EXPECT_EQ(c.readmissions, 1);
  EXPECT_EQ(c.holds, 1);
  EXPECT_EQ(c.last_readmission_evidence, "verification");
}

TEST(FleetEventCountsTest, FleetCountsEachPublishedEventOnceForBothOutputs) {
  Settings settings;
  settings.model = "m";
  settings.engines = {{"p0", "http://p0.test:8000", Role::kPrefill},
                      {"p1", "http://p1.test:8000", Role::kPrefill},
                      {"d0", "http://d0.test:8000", Role::kDecode}};
  testing::FakeClock clock;
  prometheus::Registry registry;
  Metrics metrics(registry);
  EventBus bus;
  Fleet fleet(settings, clock, &metrics, nullptr, &bus);
  ASSERT_TRUE(fleet.admin().Eject("p1", "maintenance").ok());
  clock.Advance(std::chrono::seconds(5));
  ASSERT_TRUE(fleet.admin().Readmit("p1", "operator").ok());

  EXPECT_EQ(
      Metric(registry, "narwhal_engine_ejections_total", {{"iid", "p1"}, {"cause", "operator"}}),
      1);
  EXPECT_EQ(Metric(registry, "narwhal_engine_readmissions_total",
                   {{"iid", "p1"}, {"evidence", "operator"}}),
            1);
  const std::map<std::string, EngineEventCounts> counts = fleet.admin().EventCounts();
  ASSERT_EQ(counts.count("p1"), 1u);
  EXPECT_EQ(counts.at("p1").ejections, 1);
  EXPECT_EQ(counts.at("p1").readmissions, 1);
  EXPECT_EQ(counts.at("p1").last_readmission_evidence, "operator");
  EXPECT_EQ(counts.count("p0"), 0u);
  // The bus saw the same two events, in their wire form, stamped on the
  // injected wall clock.
  std::vector<std::string> kinds;
  std::vector<double> at;
  for (const json& e : bus.Since(0)) {
    kinds.push_back(e.value("event", ""));
    at.push_back(e.value("at", 0.0));
  }
  EXPECT_EQ(kinds, (std::vector<std::string>{"engine_ejected", "engine_readmitted"}));
  ASSERT_EQ(at.size(), 2u);
  EXPECT_DOUBLE_EQ(at[1] - at[0], 5.0);
}

}  // namespace
}  // namespace narwhal::router
