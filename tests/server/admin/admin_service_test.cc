// The admin service over gRPC against a real Fleet (SPEC §7): engine and
// breaker views, operator actions and their events and metrics, readmission
// validation against narwhal-sim engines (B17), quarantine (B15),
// preflight (B18), the effective config, the bearer token, and WatchEvents
// (replay, live events, slow watchers, shutdown).
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include "server/config/config_loader.h"
#include "tests/fakes/sim_process.h"
#include "tests/router/test_util.h"
#include "tests/server/admin/admin_harness.h"

namespace narwhal::testing {
namespace {

namespace pb = narwhal::admin::v1;
using router::EngineSettings;
using router::Role;

// An address nothing listens on: for engines the test never reaches.
constexpr char kNowhere[] = "http://127.0.0.1:9";

std::vector<EngineSettings> OfflineEngines() {
  return {{"p0", kNowhere, Role::kPrefill},
          {"d0", kNowhere, Role::kDecode},
          {"d1", kNowhere, Role::kDecode}};
}

std::unique_ptr<SimProcess> StartSim(const std::string& iid, const std::string& role) {
  auto sim = SimProcess::Start({"--engine-id", iid, "--role", role});
  EXPECT_TRUE(sim.ok()) << sim.status();
  return sim.ok() ? std::move(*sim) : nullptr;
}

template <typename Request, typename Response, typename Method>
grpc::Status Call(AdminHarness& h, Method method, const Request& request, Response* response,
                  const std::string& token = "") {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
  return (h.stub().*method)(&context, request, response);
}

pb::Engine GetEngine(AdminHarness& h, const std::string& iid, const std::string& token = "") {
  pb::GetEngineRequest request;
  request.set_iid(iid);
  pb::Engine engine;
  grpc::Status s = Call(h, &pb::Admin::Stub::GetEngine, request, &engine, token);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return engine;
}

// A WatchEvents stream read by the test.
class Watcher {
 public:
  Watcher(AdminHarness& h, std::optional<long long> since_seq, const std::string& token = "") {
    pb::WatchEventsRequest request;
    if (since_seq) request.set_since_seq(*since_seq);
    if (!token.empty()) context_.AddMetadata("authorization", "Bearer " + token);
    reader_ = h.stub().WatchEvents(&context_, request);
  }
  ~Watcher() {
    if (finished_) return;
    context_.TryCancel();
    pb::Event ignored;
    while (reader_->Read(&ignored)) {
    }
    reader_->Finish();
  }

  // The next event; false when the stream ended.
  bool Next(pb::Event* event) { return reader_->Read(event); }

  // The next event of `kind` (skipping others); false when the stream ended.
  bool NextOfKind(const std::string& kind, pb::Event* event) {
    while (reader_->Read(event)) {
      if (event->kind() == kind) return true;
    }
    return false;
  }

  // The next marker `name` (AdminHarness::Mark), skipping other events.
  bool NextMarker(const std::string& name, pb::Event* event) {
    while (reader_->Read(event)) {
      if (event->iid() == name) return true;
    }
    return false;
  }

  // Once, after Next() returned false.
  grpc::Status Finish() {
    finished_ = true;
    return reader_->Finish();
  }

 private:
  bool finished_ = false;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReader<pb::Event>> reader_;
};

engines::EngineFailure Failure(const std::string& iid, engines::Phase phase,
                               engines::BreakerClass cls, engines::FailureReason reason,
                               const std::string& detail) {
  engines::EngineFailure f;
  f.phase = phase;
  f.reason = reason;
  f.breaker_class = cls;
  f.iid = iid;
  f.evidence_iid = iid;
  f.detail = detail;
  return f;
}

// ------------------------------------------------------------------ reads

TEST(AdminServiceTest, ListEnginesShowsEveryEngineInConfigOrder) {
  AdminHarness h(AdminTestSettings(OfflineEngines()));
  pb::ListEnginesResponse response;
  ASSERT_TRUE(Call(h, &pb::Admin::Stub::ListEngines, pb::ListEnginesRequest(), &response).ok());
  ASSERT_EQ(response.engines_size(), 3);
  const pb::Engine& d0 = response.engines(1);
  EXPECT_EQ(response.engines(0).iid(), "p0");
  EXPECT_EQ(response.engines(0).role(), "prefill");
  EXPECT_EQ(d0.iid(), "d0");
  EXPECT_EQ(d0.url(), kNowhere);
  EXPECT_EQ(d0.role(), "decode");
  EXPECT_EQ(d0.state(), "serving");
  EXPECT_EQ(d0.streak_size(), 7);
  for (const char* cls : {"connection", "timeout", "overload", "inference_status", "kv_handoff",
                          "stream", "liveness"}) {
    ASSERT_EQ(d0.streak().count(cls), 1u) << cls;
    EXPECT_EQ(d0.streak().at(cls), 0) << cls;
  }
  EXPECT_FALSE(d0.has_hold());
  EXPECT_FALSE(d0.has_ejection());
  EXPECT_FALSE(d0.has_last_probe());
  EXPECT_FALSE(d0.has_next_probe_in_s());
  EXPECT_EQ(d0.inflight_prefill(), 0);
  EXPECT_EQ(d0.inflight_decode(), 0);
  EXPECT_EQ(d0.explanation(), "");
}

TEST(AdminServiceTest, GetEngineShowsInFlightLegsAndStreaks) {
  AdminHarness h(AdminTestSettings(OfflineEngines()));
  auto leg = h.fleet().PickAndReserve(engines::Phase::kDecode, {"d1"});
  ASSERT_TRUE(leg.has_value());
  h.fleet().control().RecordFailure(
      Failure("d0", engines::Phase::kDecode, engines::BreakerClass::kTimeout,
              engines::FailureReason::kEngineTimeout, "engine 504"),
      "");
  const pb::Engine d0 = GetEngine(h, "d0");
  EXPECT_EQ(d0.inflight_decode(), 1);
  EXPECT_EQ(d0.inflight_prefill(), 0);
  EXPECT_EQ(d0.streak().at("timeout"), 1);
  leg->Release();
  EXPECT_EQ(GetEngine(h, "d0").inflight_decode(), 0);
}

TEST(AdminServiceTest, UnknownEngineIsNotFoundAndMissingIdInvalid) {
  AdminHarness h(AdminTestSettings(OfflineEngines()));
  pb::GetEngineRequest get;
  get.set_iid("nope");
  pb::Engine engine;
  EXPECT_EQ(Call(h, &pb::Admin::Stub::GetEngine, get, &engine).error_code(),
            grpc::StatusCode::NOT_FOUND);
  get.clear_iid();
  EXPECT_EQ(Call(h, &pb::Admin::Stub::GetEngine, get, &engine).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  pb::EjectEngineRequest eject;
  eject.set_iid("nope");
  EXPECT_EQ(Call(h, &pb::Admin::Stub::EjectEngine, eject, &engine).error_code(),
            grpc::StatusCode::NOT_FOUND);
  pb::DrainEngineRequest drain;
  drain.set_iid("nope");
  EXPECT_EQ(Call(h, &pb::Admin::Stub::DrainEngine, drain, &engine).error_code(),
            grpc::StatusCode::NOT_FOUND);
  pb::ReleaseQuarantineRequest release;
  release.set_iid("nope");
  EXPECT_EQ(Call(h, &pb::Admin::Stub::ReleaseQuarantine, release, &engine).error_code(),
            grpc::StatusCode::NOT_FOUND);
  pb::ReadmitEngineRequest readmit;
  readmit.set_iid("nope");
  pb::ReadmitEngineResponse readmitted;
  EXPECT_EQ(Call(h, &pb::Admin::Stub::ReadmitEngine, readmit, &readmitted).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

TEST(AdminServiceTest, GetConfigReturnsTheEffectiveConfig) {
  router::Settings settings = AdminTestSettings(OfflineEngines());
  settings.recovery.failure_quarantine_s = 7.5;
  settings.listen.admin = "127.0.0.1:0";
  AdminHarness h(settings);
  google::protobuf::Struct config;
  ASSERT_TRUE(Call(h, &pb::Admin::Stub::GetConfig, pb::GetConfigRequest(), &config).ok());
  std::string text;
  ASSERT_TRUE(google::protobuf::util::MessageToJsonString(config, &text).ok());
  const nlohmann::json got = nlohmann::json::parse(text);
  EXPECT_EQ(got, server::SettingsToJson(settings)) << got.dump(2);
  EXPECT_EQ(got["recovery"]["failure_quarantine_s"], 7.5);
  EXPECT_EQ(got["listen"]["admin"], "127.0.0.1:0");
  EXPECT_EQ(got["engines"][1]["iid"], "d0");
  EXPECT_EQ(got["serving"]["max_attempts"], 1);
}

// ------------------------------------------------------------------ actions

TEST(AdminServiceTest, EjectEngineExplainsItPublishesAnEventAndCountsIt) {
  AdminHarness h(AdminTestSettings(OfflineEngines()));
  pb::EjectEngineRequest request;
  request.set_iid("d0");
  request.set_reason("GPU 3 reports ECC errors");
  pb::Engine engine;
  ASSERT_TRUE(Call(h, &pb::Admin::Stub::EjectEngine, request, &engine).ok());
  EXPECT_EQ(engine.state(), "ejected");
  ASSERT_TRUE(engine.has_ejection());
  EXPECT_EQ(engine.ejection().cause(), "operator");
  EXPECT_EQ(engine.ejection().detail(), "GPU 3 reports ECC errors");
  EXPECT_EQ(engine.last_ejection_cause(), "operator");
  // An operator's ejection sticks: no probe brings the engine back.
  EXPECT_EQ(engine.explanation(),
            "ejected (operator): GPU 3 reports ECC errors; returns when an operator readmits it");
  EXPECT_FALSE(engine.has_next_probe_in_s());
  EXPECT_EQ(GetEngine(h, "d0").state(), "ejected");

  Watcher watcher(h, 0);
  pb::Event event;
  ASSERT_TRUE(watcher.NextOfKind("engine_ejected", &event));
  EXPECT_EQ(event.iid(), "d0");
  EXPECT_EQ(event.cause(), "operator");
  EXPECT_EQ(event.detail(), "GPU 3 reports ECC errors");
  EXPECT_GT(event.seq(), 0);
  EXPECT_GT(event.at(), 1.7e9);
  // The typed fields are not repeated in `fields`.
  for (const char* typed : {"event", "iid", "cause", "detail", "seq", "at"}) {
    EXPECT_EQ(event.fields().fields().count(typed), 0u) << typed;
  }

  EXPECT_EQ(MetricValue(h.registry(), "narwhal_engine_ejections_total",
                        {{"iid", "d0"}, {"cause", "operator"}}),
            1);

  pb::GetBreakersResponse breakers;
  ASSERT_TRUE(Call(h, &pb::Admin::Stub::GetBreakers, pb::GetBreakersRequest(), &breakers).ok());
  ASSERT_EQ(breakers.engines_size(), 3);
  EXPECT_EQ(breakers.engines(1).iid(), "d0");
  EXPECT_EQ(breakers.engines(1).state(), "ejected");
  EXPECT_EQ(breakers.engines(1).counters().ejections(), 1);
  EXPECT_EQ(breakers.engines(0).counters().ejections(), 0);
  EXPECT_FALSE(breakers.ready());  // no engine has passed a check yet
  for (const char* iid : {"p0", "d1"})
    h.fleet().control().RecordSuccess(iid, router::Success::kHealth);
  ASSERT_TRUE(Call(h, &pb::Admin::Stub::GetBreakers, pb::GetBreakersRequest(), &breakers).ok());
  EXPECT_TRUE(breakers.ready());  // d1 still decodes
  EXPECT_EQ(breakers.policy().eject_after(), 3);
  EXPECT_EQ(breakers.policy().engine_restart_policy(), "individual");

  // Ejecting again changes nothing.
  ASSERT_TRUE(Call(h, &pb::Admin::Stub::EjectEngine, request, &engine).ok());
  EXPECT_EQ(MetricValue(h.registry(), "narwhal_engine_ejections_total",
                        {{"iid", "d0"}, {"cause", "operator"}}),
            1);
}

TEST(AdminServiceTest, GetBreakersReportsNotReadyWhenARoleHasNoEngine) {
  AdminHarness h(AdminTestSettings(OfflineEngines()));
  pb::Engine engine;
  for (const char* iid : {"d0", "d1"}) {
    pb::EjectEngineRequest request;
    request.set_iid(iid);
    if (std::string(iid) == "d1") {
      // The last decode engine: refused unless forced.
      const grpc::Status refused = Call(h, &pb::Admin::Stub::EjectEngine, request, &engine);
      EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
      EXPECT_NE(refused.error_message().find("last engine in placement for the decode role"),
                std::string::npos)
          << refused.error_message();
      request.set_force(true);
    }
    ASSERT_TRUE(Call(h, &pb::Admin::Stub::EjectEngine, request, &engine).ok());
  }
  pb::GetBreakersResponse breakers;
  ASSERT_TRUE(Call(h, &pb::Admin::Stub::GetBreakers, pb::GetBreakersRequest(), &breakers).ok());
  EXPECT_FALSE(breakers.ready());
  EXPECT_EQ(breakers.not_ready_reason(), "no engine in placement for the decode role");
}

TEST(AdminServiceTest, DrainEngineTakesItOutUntilReadmitted) {
  AdminHarness h(AdminTestSettings(OfflineEngines()));
  pb::DrainEngineRequest request;
  request.set_iid("d1");
  pb::Engine engine;
  ASSERT_TRUE(Call(h, &pb::Admin::Stub::DrainEngine, request, &engine).ok());
  EXPECT_EQ(engine.state(), "draining");
  EXPECT_EQ(engine.explanation(), "drained by an operator; readmit to return it");
  EXPECT_FALSE(h.fleet().CanPlace(engines::Phase::kDecode, {"d0"}));

  Watcher watcher(h, 0);
  pb::Event event;
  ASSERT_TRUE(watcher.NextOfKind("engine_drained", &event));
  EXPECT_EQ(event.iid(), "d1");

  // Readmission validates: nothing answers at the engine's URL.
  pb::ReadmitEngineRequest readmit;
  readmit.set_iid("d1");
  pb::ReadmitEngineResponse response;
  const grpc::Status s = Call(h, &pb::Admin::Stub::ReadmitEngine, readmit, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("readmission of d1 refused: health validation failed"),
            std::string::npos)
      << s.error_message();
  EXPECT_EQ(GetEngine(h, "d1").state(), "draining");
}

TEST(AdminServiceTest, AddEngineRefusesAnotherIidForAnEngineAlreadyInTheFleet) {
  AdminHarness h(AdminTestSettings(OfflineEngines()));  // every engine at 127.0.0.1:9
  pb::Engine engine;
  pb::AddEngineRequest request;
  request.set_iid("d9");
  request.set_role("decode");
  // The same address in another spelling is the same engine.
  for (const char* url : {"http://localhost:9", "http://127.0.0.1:9/", "http://[::1]:9"}) {
    request.set_url(url);
    const grpc::Status s = Call(h, &pb::Admin::Stub::AddEngine, request, &engine);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::ALREADY_EXISTS) << url;
    EXPECT_NE(s.error_message().find("is engine p0's (http://127.0.0.1:9)"), std::string::npos)
        << s.error_message();
  }
  pb::GetEngineRequest get;
  get.set_iid("d9");
  EXPECT_EQ(Call(h, &pb::Admin::Stub::GetEngine, get, &engine).error_code(),
            grpc::StatusCode::NOT_FOUND);
  // Another port is another engine.
  request.set_url("http://127.0.0.1:10");
  ASSERT_TRUE(Call(h, &pb::Admin::Stub::AddEngine, request, &engine).ok());
  EXPECT_EQ(engine.iid(), "d9");
}

TEST(AdminServiceTest, B26_AddEngineTakesItsKvEventEndpoints) {
  AdminHarness h(AdminTestSettings(OfflineEngines()));
  pb::Engine engine;
  pb::AddEngineRequest request;
  request.set_iid("d9");
  request.set_role("decode");
  request.set_url("http://127.0.0.1:19");
  // vLLM's bind wildcard names no engine; a replay endpoint alone has no
  // stream to repair.
  request.set_kv_events("tcp://*:5557");
  grpc::Status s = Call(h, &pb::Admin::Stub::AddEngine, request, &engine);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("kv_events must be tcp://host:port"), std::string::npos)
      << s.error_message();
  request.clear_kv_events();
  request.set_kv_events_replay("tcp://127.0.0.1:5558");
  s = Call(h, &pb::Admin::Stub::AddEngine, request, &engine);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("kv_events_replay is only valid with kv_events"),
            std::string::npos)
      << s.error_message();
  request.set_kv_events("tcp://127.0.0.1:5557");
  ASSERT_TRUE(Call(h, &pb::Admin::Stub::AddEngine, request, &engine).ok());
  // The subscriber is handed what the fleet's members publish.
  bool found = false;
  for (const router::KvEndpoint& e : h.fleet().control().KvEndpoints()) {
    if (e.iid != "d9") continue;
    found = true;
    EXPECT_EQ(e.events, "tcp://127.0.0.1:5557");
    EXPECT_EQ(e.replay, "tcp://127.0.0.1:5558");
  }
  EXPECT_TRUE(found);
}

TEST(AdminServiceTest, DrainingTheLastEngineOfARoleNeedsForce) {
  AdminHarness h(AdminTestSettings(OfflineEngines()));
  pb::Engine engine;
  pb::DrainEngineRequest first;
  first.set_iid("d0");
  ASSERT_TRUE(Call(h, &pb::Admin::Stub::DrainEngine, first, &engine).ok());
  // d1 is now the last decode engine in placement: every request would 503.
  pb::DrainEngineRequest last;
  last.set_iid("d1");
  const grpc::Status refused = Call(h, &pb::Admin::Stub::DrainEngine, last, &engine);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(refused.error_message().find("last engine in placement for the decode role"),
            std::string::npos)
      << refused.error_message();
  EXPECT_EQ(GetEngine(h, "d1").state(), "serving");
  last.set_force(true);
  ASSERT_TRUE(Call(h, &pb::Admin::Stub::DrainEngine, last, &engine).ok());
  EXPECT_EQ(engine.state(), "draining");
}

TEST(AdminServiceTest, ReadmitEngineRunsAHealthCheckAgainstTheLiveEngine) {
  auto p0 = StartSim("p0", "prefill");
  auto d0 = StartSim("d0", "decode");
  auto d1 = StartSim("d1", "decode");
  ASSERT_TRUE(p0 && d0 && d1);
  AdminHarness h(AdminTestSettings({{"p0", p0->url(), Role::kPrefill},
                                    {"d0", d0->url(), Role::kDecode},
                                    {"d1", d1->url(), Role::kDecode}}));
  pb::EjectEngineRequest eject;
  eject.set_iid("d0");
  pb::Engine engine;
  ASSERT_TRUE(Call(h, &pb::Admin::Stub::EjectEngine, eject, &engine).ok());

  // The engine is gone: readmission is refused with the reason.
  d0->Kill(SIGKILL);
  ASSERT_TRUE(d0->Wait(absl::Seconds(10)).has_value());
  pb::ReadmitEngineRequest readmit;
  readmit.set_iid("d0");
  pb::ReadmitEngineResponse response;
  grpc::Status s = Call(h, &pb::Admin::Stub::ReadmitEngine, readmit, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("health validation failed"), std::string::npos)
      << s.error_message();
  EXPECT_EQ(GetEngine(h, "d0").state(), "ejected");
  {
    Watcher watcher(h, 0);
    pb::Event event;
    ASSERT_TRUE(watcher.NextOfKind("engine_readmit_refused", &event));
    EXPECT_EQ(event.iid(), "d0");
    EXPECT_EQ(event.probe_kind(), "health");
    EXPECT_EQ(event.outcome(), "failed");
  }

  // Back on the same port: readmitted on health evidence.
  ASSERT_TRUE(d0->Restart().ok());
  s = Call(h, &pb::Admin::Stub::ReadmitEngine, readmit, &response);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(response.readmitted());
  EXPECT_EQ(response.validation(), "health");
  EXPECT_EQ(response.evidence(), "health");
  EXPECT_EQ(response.engine().state(), "serving");
  EXPECT_FALSE(response.engine().has_ejection());
  EXPECT_EQ(response.engine().last_ejection_cause(), "operator");
  EXPECT_EQ(MetricValue(h.registry(), "narwhal_engine_readmissions_total",
                        {{"iid", "d0"}, {"evidence", "health"}}),
            1);

  // A serving engine is left alone.
  s = Call(h, &pb::Admin::Stub::ReadmitEngine, readmit, &response);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_FALSE(response.readmitted());
  EXPECT_EQ(response.engine().state(), "serving");
}

TEST(AdminServiceTest, ReadmitEngineOnInferenceEvidenceRunsAnInferenceProbe) {
  auto p0 = StartSim("p0", "prefill");
  auto d0 = StartSim("d0", "decode");
  auto d1 = StartSim("d1", "decode");
  ASSERT_TRUE(p0 && d0 && d1);
  AdminHarness h(AdminTestSettings({{"p0", p0->url(), Role::kPrefill},
                                    {"d0", d0->url(), Role::kDecode},
                                    {"d1", d1->url(), Role::kDecode}}));
  // Three 5xx decode failures: an inference hold (B17).
  for (int i = 0; i < 3; ++i) {
    h.fleet().control().RecordFailure(
        Failure("d0", engines::Phase::kDecode, engines::BreakerClass::kInferenceStatus,
                engines::FailureReason::kEngineError, "engine answered 500"),
        "p0");
  }
  pb::Engine held = GetEngine(h, "d0");
  ASSERT_EQ(held.state(), "held");
  ASSERT_TRUE(held.has_hold());
  EXPECT_EQ(held.hold().kind(), "inference");
  EXPECT_FALSE(held.hold().has_remaining_s());
  EXPECT_NE(held.hold().cause().find("engine answered 500"), std::string::npos);
  EXPECT_EQ(held.streak().at("inference_status"), 3);
  EXPECT_NE(held.explanation().find("returns when an inference probe passes"), std::string::npos);

  // The engine still fails to decode: refused, and the probe reached it.
  ASSERT_TRUE(d0->SetFaults(nlohmann::json::parse(
                                R"({"faults":[{"kind":"silent_before_first_token",
                                               "phase":"decode","times":-1}]})"))
                  .ok());
  pb::ReadmitEngineRequest readmit;
  readmit.set_iid("d0");
  pb::ReadmitEngineResponse response;
  grpc::Status s = Call(h, &pb::Admin::Stub::ReadmitEngine, readmit, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  // (The probe leg's deadline and the first-token budget are the same
  // length: either may report the silence.)
  EXPECT_NE(s.error_message().find("readmission of d0 refused: inference validation failed: "),
            std::string::npos)
      << s.error_message();
  EXPECT_EQ(GetEngine(h, "d0").state(), "held");
  auto faults = d0->Faults();
  ASSERT_TRUE(faults.ok()) << faults.status();
  EXPECT_GE((*faults)["faults"][0].value("fired", 0), 1) << faults->dump();

  // Healthy again: readmitted on verification evidence.
  ASSERT_TRUE(d0->ClearFaults().ok());
  s = Call(h, &pb::Admin::Stub::ReadmitEngine, readmit, &response);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(response.readmitted());
  EXPECT_EQ(response.validation(), "inference");
  EXPECT_EQ(response.evidence(), "verification");
  EXPECT_EQ(response.engine().state(), "serving");
  EXPECT_EQ(response.engine().streak().at("inference_status"), 0);
  EXPECT_EQ(MetricValue(h.registry(), "narwhal_engine_readmissions_total",
                        {{"iid", "d0"}, {"evidence", "verification"}}),
            1);
}

TEST(AdminServiceTest, AnEngineEjectedWhileHeldReturnsOnlyThroughAnInferenceProbe) {
  auto p0 = StartSim("p0", "prefill");
  auto d0 = StartSim("d0", "decode");
  auto d1 = StartSim("d1", "decode");
  ASSERT_TRUE(p0 && d0 && d1);
  AdminHarness h(AdminTestSettings({{"p0", p0->url(), Role::kPrefill},
                                    {"d0", d0->url(), Role::kDecode},
                                    {"d1", d1->url(), Role::kDecode}}));
  for (int i = 0; i < 3; ++i) {
    h.fleet().control().RecordFailure(
        Failure("d0", engines::Phase::kDecode, engines::BreakerClass::kKvHandoff,
                engines::FailureReason::kInvalidResponse, "no handoff: descriptor missing"),
        "p0");
  }
  ASSERT_EQ(GetEngine(h, "d0").state(), "held");
  pb::EjectEngineRequest eject;
  eject.set_iid("d0");
  pb::Engine engine;
  ASSERT_TRUE(Call(h, &pb::Admin::Stub::EjectEngine, eject, &engine).ok());
  ASSERT_EQ(engine.state(), "ejected");

  // /health answers, but decoding does not: a health check would pass.
  ASSERT_TRUE(d0->SetFaults(nlohmann::json::parse(
                                R"({"faults":[{"kind":"silent_before_first_token",
                                               "phase":"decode","times":-1}]})"))
                  .ok());
  pb::ReadmitEngineRequest readmit;
  readmit.set_iid("d0");
  pb::ReadmitEngineResponse response;
  grpc::Status s = Call(h, &pb::Admin::Stub::ReadmitEngine, readmit, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("inference validation failed"), std::string::npos)
      << s.error_message();
  EXPECT_EQ(GetEngine(h, "d0").state(), "ejected");

  ASSERT_TRUE(d0->ClearFaults().ok());
  s = Call(h, &pb::Admin::Stub::ReadmitEngine, readmit, &response);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(response.validation(), "inference");
  EXPECT_EQ(response.evidence(), "verification");
  EXPECT_EQ(response.engine().state(), "serving");
}

TEST(AdminServiceTest, ListQuarantineShowsRemainingTimeAndTheFailureThatStartedIt) {
  router::Settings settings = AdminTestSettings(OfflineEngines());
  settings.recovery.failure_quarantine_s = 30;
  AdminHarness h(settings);
  pb::ListQuarantineResponse list;
  ASSERT_TRUE(Call(h, &pb::Admin::Stub::ListQuarantine, pb::ListQuarantineRequest(), &list).ok());
  EXPECT_EQ(list.engines_size(), 0);

  h.fleet().control().RecordFailure(
      Failure("d0", engines::Phase::kDecode, engines::BreakerClass::kStream,
              engines::FailureReason::kEngineTimeout, "no first token within 1.000 s"),
      "");
  ASSERT_TRUE(Call(h, &pb::Admin::Stub::ListQuarantine, pb::ListQuarantineRequest(), &list).ok());
  ASSERT_EQ(list.engines_size(), 1);
  const pb::QuarantineEntry& q = list.engines(0);
  EXPECT_EQ(q.iid(), "d0");
  EXPECT_GT(q.remaining_s(), 20);
  EXPECT_LE(q.remaining_s(), 30);
  EXPECT_EQ(q.cause(), "decode engine_timeout: no first token within 1.000 s");
  EXPECT_GE(q.held_for_s(), 0);
  EXPECT_LT(q.held_for_s(), 10);

  const pb::Engine d0 = GetEngine(h, "d0");
  EXPECT_EQ(d0.state(), "quarantined");
  ASSERT_TRUE(d0.has_hold());
  EXPECT_EQ(d0.hold().kind(), "timed");
  ASSERT_TRUE(d0.hold().has_remaining_s());
  EXPECT_EQ(d0.hold().cause(), q.cause());

  // Manual release (B15).
  pb::ReleaseQuarantineRequest release;
  release.set_iid("d0");
  pb::Engine engine;
  ASSERT_TRUE(Call(h, &pb::Admin::Stub::ReleaseQuarantine, release, &engine).ok());
  EXPECT_EQ(engine.state(), "serving");
  EXPECT_FALSE(engine.has_hold());
  ASSERT_TRUE(Call(h, &pb::Admin::Stub::ListQuarantine, pb::ListQuarantineRequest(), &list).ok());
  EXPECT_EQ(list.engines_size(), 0);
  Watcher watcher(h, 0);
  pb::Event event;
  ASSERT_TRUE(watcher.NextOfKind("engine_hold_ended", &event));
  EXPECT_EQ(event.iid(), "d0");
  EXPECT_EQ(event.hold_kind(), "timed");
  EXPECT_EQ(event.cause(), "operator");

  const grpc::Status again = Call(h, &pb::Admin::Stub::ReleaseQuarantine, release, &engine);
  EXPECT_EQ(again.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(again.error_message(), "engine d0 is not quarantined");
}

// ------------------------------------------------------------------ preflight

TEST(AdminServiceTest, RunPreflightReturnsAndKeepsTheReport) {
  auto p0 = StartSim("p0", "prefill");
  auto d0 = StartSim("d0", "decode");
  ASSERT_TRUE(p0 && d0);
  AdminHarness h(
      AdminTestSettings({{"p0", p0->url(), Role::kPrefill}, {"d0", d0->url(), Role::kDecode}}));
  pb::PreflightReport report;
  grpc::Status s =
      Call(h, &pb::Admin::Stub::GetPreflightReport, pb::GetPreflightReportRequest(), &report);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);

  pb::RunPreflightRequest request;
  request.set_pairs(pb::PAIRS_RING);
  s = Call(h, &pb::Admin::Stub::RunPreflight, request, &report);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(report.passed()) << report.table();
  EXPECT_EQ(report.pairs(), pb::PAIRS_RING);
  EXPECT_EQ(report.trigger(), "admin");
  EXPECT_GT(report.started_at(), 1.7e9);
  EXPECT_GT(report.duration_s(), 0);
  std::vector<std::string> gates;
  for (const pb::PreflightGate& g : report.gates()) {
    gates.push_back(g.name());
    EXPECT_TRUE(g.passed()) << g.name() << ": " << g.detail();
  }
  EXPECT_EQ(gates, (std::vector<std::string>{"reach", "contract", "model", "produce", "consume"}));
  EXPECT_FALSE(report.checks().empty());
  ASSERT_EQ(report.transfers_size(), 1);
  EXPECT_EQ(report.transfers(0).producer(), "p0");
  EXPECT_EQ(report.transfers(0).consumer(), "d0");
  EXPECT_EQ(report.transfers(0).outcome(), "passed");
  EXPECT_GT(report.transfers(0).first_token_s(), 0);
  EXPECT_NE(report.table().find("consume"), std::string::npos);

  pb::PreflightReport last;
  s = Call(h, &pb::Admin::Stub::GetPreflightReport, pb::GetPreflightReportRequest(), &last);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(last.SerializeAsString(), report.SerializeAsString());

  Watcher watcher(h, 0);
  pb::Event event;
  ASSERT_TRUE(watcher.NextOfKind("preflight", &event));
  EXPECT_EQ(event.outcome(), "passed");
  EXPECT_EQ(event.fields().fields().at("trigger").string_value(), "admin");
  EXPECT_EQ(event.fields().fields().at("transfers_passed").number_value(), 1);
}

TEST(AdminServiceTest, RunPreflightReportsAFailedTransferAndOnlyOneRunsAtATime) {
  auto p0 = StartSim("p0", "prefill");
  auto d0 = StartSim("d0", "decode");
  ASSERT_TRUE(p0 && d0);
  // The decode engine never produces a first token.
  ASSERT_TRUE(d0->SetFaults(nlohmann::json::parse(
                                R"({"faults":[{"kind":"silent_before_first_token",
                                               "phase":"decode","times":-1}]})"))
                  .ok());
  AdminHarness h(
      AdminTestSettings({{"p0", p0->url(), Role::kPrefill}, {"d0", d0->url(), Role::kDecode}}));
  // Two at once: the consume gate takes the first-token budget, so they
  // overlap and the later one is refused.
  auto run = [&h] {
    pb::PreflightReport report;
    grpc::Status s = Call(h, &pb::Admin::Stub::RunPreflight, pb::RunPreflightRequest(), &report);
    return std::make_pair(s, report);
  };
  auto first = std::async(std::launch::async, run);
  auto second = std::async(std::launch::async, run);
  auto a = first.get();
  auto b = second.get();
  ASSERT_NE(a.first.ok(), b.first.ok())
      << a.first.error_message() << " / " << b.first.error_message();
  const auto& done = a.first.ok() ? a : b;
  const auto& refused = a.first.ok() ? b : a;
  EXPECT_EQ(refused.first.error_code(), grpc::StatusCode::ABORTED);
  const pb::PreflightReport& report = done.second;
  EXPECT_FALSE(report.passed());
  EXPECT_EQ(report.pairs(), pb::PAIRS_MESH);
  ASSERT_EQ(report.transfers_size(), 1);
  EXPECT_EQ(report.transfers(0).outcome(), "unconfirmed_transfer");
  bool consume_failed = false;
  for (const pb::PreflightGate& g : report.gates()) {
    if (g.name() == "consume") consume_failed = !g.passed() && !g.skipped();
  }
  EXPECT_TRUE(consume_failed) << report.table();

  Watcher watcher(h, 0);
  pb::Event event;
  ASSERT_TRUE(watcher.NextOfKind("preflight", &event));
  EXPECT_EQ(event.outcome(), "failed");
  EXPECT_NE(event.detail().find("gate consume failed"), std::string::npos) << event.detail();
}

// ------------------------------------------------------------------ auth

TEST(AdminServiceTest, TokenIsRequiredWhenConfigured) {
  server::AdminOptions options;
  options.token = "s3cret-token";
  AdminHarness h(AdminTestSettings(OfflineEngines()), options);
  pb::ListEnginesResponse response;
  grpc::Status s = Call(h, &pb::Admin::Stub::ListEngines, pb::ListEnginesRequest(), &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  s = Call(h, &pb::Admin::Stub::ListEngines, pb::ListEnginesRequest(), &response, "wrong");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(response.engines_size(), 0);

  pb::EjectEngineRequest eject;
  eject.set_iid("d0");
  pb::Engine engine;
  s = Call(h, &pb::Admin::Stub::EjectEngine, eject, &engine, "wrong");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(GetEngine(h, "d0", "s3cret-token").state(), "serving");

  s = Call(h, &pb::Admin::Stub::ListEngines, pb::ListEnginesRequest(), &response, "s3cret-token");
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(response.engines_size(), 3);

  {
    Watcher watcher(h, 0);
    pb::Event event;
    EXPECT_FALSE(watcher.Next(&event));
    EXPECT_EQ(watcher.Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  h.Mark("test_marker");
  Watcher watcher(h, 0, "s3cret-token");
  pb::Event event;
  ASSERT_TRUE(watcher.NextMarker("test_marker", &event));
}

// ------------------------------------------------------------------ events

TEST(AdminServiceTest, WatchEventsReplaysSinceSeqThenStreamsNewEvents) {
  AdminHarness h(AdminTestSettings(OfflineEngines()));
  for (int i = 1; i <= 3; ++i) h.Mark("test_marker", std::to_string(i));

  Watcher watcher(h, 1);
  pb::Event event;
  ASSERT_TRUE(watcher.Next(&event));
  EXPECT_EQ(event.seq(), 2);
  EXPECT_EQ(event.iid(), "test_marker");
  EXPECT_EQ(event.detail(), "2");
  ASSERT_TRUE(watcher.Next(&event));
  EXPECT_EQ(event.seq(), 3);

  pb::EjectEngineRequest eject;
  eject.set_iid("p0");
  eject.set_force(true);  // the only prefill engine
  pb::Engine engine;
  ASSERT_TRUE(Call(h, &pb::Admin::Stub::EjectEngine, eject, &engine).ok());
  ASSERT_TRUE(watcher.Next(&event));
  EXPECT_EQ(event.seq(), 4);
  EXPECT_EQ(event.kind(), "engine_ejected");
  EXPECT_EQ(event.iid(), "p0");
}

TEST(AdminServiceTest, WatchEventsWithoutSinceSeqStreamsOnlyNewEvents) {
  AdminHarness h(AdminTestSettings(OfflineEngines()));
  for (int i = 1; i <= 3; ++i) h.Mark("old_marker");
  Watcher watcher(h, std::nullopt);
  // The stream has no way to say it is subscribed: publish until it sees one.
  std::atomic<bool> stop{false};
  std::thread publisher([&] {
    while (!stop) {
      h.Mark("new_marker");
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  pb::Event event;
  const bool got = watcher.Next(&event);
  stop = true;
  publisher.join();
  ASSERT_TRUE(got);
  EXPECT_EQ(event.iid(), "new_marker");
  EXPECT_GT(event.seq(), 3);
}

TEST(AdminServiceTest, SlowWatcherIsEndedWithoutBlockingPublishers) {
  server::AdminOptions options;
  options.watch_queue = 16;
  // The overflow is what this test ends the stream with; the stall deadline
  // (a separate rule, tested on its own) must not run out while a slow
  // (sanitizer) build still publishes the flood.
  options.watch_stall_timeout = std::chrono::seconds(60);
  AdminHarness h(AdminTestSettings(OfflineEngines()), options);
  h.Mark("test_marker");
  Watcher slow(h, 0);
  pb::Event event;
  ASSERT_TRUE(slow.Next(&event));  // subscribed; from here on it reads nothing

  // Far more than the transport buffers and the queue hold.
  const std::string detail(4096, 'x');
  constexpr int kEvents = 20000;
  std::chrono::steady_clock::duration slowest{};
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kEvents; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    h.Mark("flood", detail);
    slowest = std::max(slowest, std::chrono::steady_clock::now() - t0);
  }
  const auto total = std::chrono::steady_clock::now() - start;
  EXPECT_LT(slowest, std::chrono::milliseconds(500));
  EXPECT_LT(total, std::chrono::seconds(30));

  // The watcher gets what was in flight, then RESOURCE_EXHAUSTED.
  int received = 0;
  while (slow.Next(&event)) ++received;
  EXPECT_LT(received, kEvents);
  const grpc::Status s = slow.Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_NE(s.error_message().find("since_seq"), std::string::npos);

  // Others are unaffected.
  Watcher fresh(h, kEvents);
  h.Mark("after_flood");
  ASSERT_TRUE(fresh.NextMarker("after_flood", &event));
}

TEST(AdminServiceTest, ShutdownEndsWatchStreamsPromptly) {
  AdminHarness h(AdminTestSettings(OfflineEngines()));
  h.Mark("test_marker");
  Watcher watcher(h, 0);
  pb::Event event;
  ASSERT_TRUE(watcher.Next(&event));
  const auto start = std::chrono::steady_clock::now();
  h.service().Shutdown();
  EXPECT_FALSE(watcher.Next(&event));
  const grpc::Status s = watcher.Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  h.server().Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
}

TEST(AdminServiceTest, CallsAfterShutdownAreUnavailable) {
  AdminHarness h(AdminTestSettings(OfflineEngines()));
  h.service().Shutdown();
  pb::ListEnginesResponse response;
  EXPECT_EQ(
      Call(h, &pb::Admin::Stub::ListEngines, pb::ListEnginesRequest(), &response).error_code(),
      grpc::StatusCode::UNAVAILABLE);
  Watcher watcher(h, 0);
  pb::Event event;
  EXPECT_FALSE(watcher.Next(&event));
  EXPECT_EQ(watcher.Finish().error_code(), grpc::StatusCode::UNAVAILABLE);
}

}  // namespace
}  // namespace narwhal::testing
