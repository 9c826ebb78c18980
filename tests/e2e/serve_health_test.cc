// End-to-end tests of narwhal-serve's health: grpc.health.v1.Health (Check
// and Watch, through a real client stub) on the inference and admin ports,
// and /ready, both following readiness: NOT_SERVING until every role has an
// engine that passed a check, SERVING then, NOT_SERVING again once a drain
// starts.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <map>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "narwhal/admin/v1/admin.grpc.pb.h"
#include "narwhal/v1/inference.grpc.pb.h"
#include "tests/e2e/e2e_util.h"

namespace narwhal::testing {
namespace {

using grpc::health::v1::Health;
using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

struct CheckResult {
  grpc::StatusCode code = grpc::StatusCode::UNKNOWN;
  HealthCheckResponse::ServingStatus status = HealthCheckResponse::UNKNOWN;
};

CheckResult Check(int port, const std::string& service) {
  auto stub = Health::NewStub(
      grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  HealthCheckRequest req;
  req.set_service(service);
  HealthCheckResponse resp;
  const grpc::Status s = stub->Check(&context, req, &resp);
  return {s.error_code(), resp.status()};
}

const std::string kInference = narwhal::v1::Inference::service_full_name();
const std::string kAdmin = narwhal::admin::v1::Admin::service_full_name();

class ServeHealthTest : public E2eTest {};

TEST_F(ServeHealthTest, NotServingWhileARoleHasNoCheckedEngine) {
  // The only decode engine refuses connections: it never passes a check.
  ServeProcess& router =
      StartRouterWith({{"p0", SimUrl("p0"), "prefill"}, {"d0", "http://127.0.0.1:1", "decode"}});
  // Long enough for start-up checks to have run (they start at once).
  absl::SleepFor(absl::Milliseconds(800));
  for (int port : {router.grpc_port(), router.admin_port()}) {
    const CheckResult all = Check(port, "");
    EXPECT_EQ(all.code, grpc::StatusCode::OK);
    EXPECT_EQ(all.status, HealthCheckResponse::NOT_SERVING) << "port " << port;
  }
  EXPECT_EQ(Check(router.grpc_port(), kInference).status, HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(Check(router.admin_port(), kAdmin).status, HealthCheckResponse::NOT_SERVING);
  // Liveness is the process's, not the fleet's: SERVING on both ports.
  for (int port : {router.grpc_port(), router.admin_port()}) {
    EXPECT_EQ(Check(port, "narwhal.liveness").status, HealthCheckResponse::SERVING)
        << "port " << port;
  }
  const HttpResult ready = HttpGet(router.http_port(), "/ready");
  EXPECT_EQ(ready.status, 503) << ready.body;
  EXPECT_NE(ready.body.find("decode"), std::string::npos) << ready.body;
}

// An engine that refuses every inference leg with 401 (started with an API
// key the router does not send, as vLLM's --api-key) is engine evidence: no
// client is told its own key or model is wrong, the engine leaves
// placement, and its health check (which reads /v1/models) fails, so it
// never counts towards readiness.
TEST_F(ServeHealthTest, EngineThatRefusesTheRoutersKeyIsTakenOutNotBlamedOnTheClient) {
  ASSERT_EQ(::setenv("NARWHAL_E2E_ENGINE_KEY", "engine-only-key", 1), 0);
  absl::StatusOr<std::unique_ptr<SimProcess>> keyed = SimProcess::Start(
      {"--engine-id", "dk", "--role", "decode", "--api-key-env", "NARWHAL_E2E_ENGINE_KEY"});
  ASSERT_TRUE(keyed.ok()) << keyed.status();
  ServeProcess& router =
      StartRouterWith({{"p0", SimUrl("p0"), "prefill"},
                       {"p1", SimUrl("p1"), "prefill"},
                       {"d0", SimUrl("d0"), "decode"},
                       {"dk", (*keyed)->url(), "decode"}},
                      {{"serving", {{"max_attempts", 2}}},
                       {"recovery", {{"eject_after", 3}, {"readmit_interval_s", 30}}}});
  std::map<int, int> statuses;
  for (int i = 0; i < 20; ++i) {
    HttpCapture c =
        Send(router, kCompletions, Completion("refused " + std::to_string(i), 3, false));
    ++statuses[c.status];
    EXPECT_NE(c.status, 401) << Describe(c);
    EXPECT_NE(c.status, 404) << Describe(c);
  }
  // Every request is served: a refused leg is retried on d0 (a failed
  // decode also excludes its producer, so the fleet has two).
  EXPECT_EQ(statuses[200], 20);
  // dk took at most eject_after legs before it left placement.
  EXPECT_LE(SimRequests(**keyed, "decode").size(), 3u);
  EXPECT_TRUE(WaitUntil(
      [&] {
        return MetricSum(Metrics(router), "narwhal_engine_in_placement", {{"iid", "dk"}}) == 0;
      },
      absl::Seconds(5)));
  // Its own health check names the refusal.
  EXPECT_TRUE(WaitUntil(
      [&] {
        return absl::StrContains(router.Stderr(), "engine dk") &&
               absl::StrContains(router.Stderr(), "GET /v1/models: HTTP 401");
      },
      absl::Seconds(5)))
      << router.Stderr();
}

// An engine that drops every inference connection but answers /health is
// taken out and stays out: a passing health check never clears inference
// evidence, and an engine that fails again after a readmission on health
// alone returns only through an inference probe.
TEST_F(ServeHealthTest, EngineThatDropsInferenceButAnswersHealthIsTakenOut) {
  absl::StatusOr<std::unique_ptr<SimProcess>> dropping =
      SimProcess::Start({"--engine-id", "dx", "--role", "decode"});
  ASSERT_TRUE(dropping.ok()) << dropping.status();
  ASSERT_TRUE(
      (*dropping)
          ->SetFaults(
              {{"faults", {{{"kind", "drop_connection"}, {"phase", "decode"}, {"times", -1}}}}})
          .ok());
  ServeProcess& router = StartRouterWith(
      {{"p0", SimUrl("p0"), "prefill"},
       {"p1", SimUrl("p1"), "prefill"},
       {"d0", SimUrl("d0"), "decode"},
       {"dx", (*dropping)->url(), "decode"}},
      {{"serving", {{"max_attempts", 2}}},
       {"recovery",
        {{"eject_after", 3}, {"readmit_interval_s", 0.3}, {"liveness_interval_s", 0.2}}}});
  int ok = 0;
  for (int i = 0; i < 40; ++i) {
    HttpCapture c =
        Send(router, kCompletions, Completion("dropped " + std::to_string(i), 2, false));
    if (c.status == 200) ++ok;
    absl::SleepFor(absl::Milliseconds(50));  // room for health checks between requests
  }
  EXPECT_EQ(ok, 40);
  // Its dropped legs (timeout evidence) asked for a health probe, which
  // passed; the next failure held it for an inference probe, which failed:
  // ejected as an inference suspect, and its client decode legs are bounded
  // (2 × eject_after).
  size_t client_decodes = 0;
  for (const json& r : SimRequests(**dropping, "decode")) {
    const std::string id = r["headers"].value("x-request-id", "");
    if (id.rfind("narwhal-probe-", 0) != 0) ++client_decodes;
  }
  EXPECT_LE(client_decodes, 6u);
  EXPECT_GE(MetricSum(Metrics(router), "narwhal_engine_ejections_total", {{"iid", "dx"}}), 1);
  EXPECT_EQ(MetricSum(Metrics(router), "narwhal_engine_in_placement", {{"iid", "dx"}}), 0);
}

TEST_F(ServeHealthTest, ServingPerServiceNameOnBothPortsOnceReady) {
  ServeProcess& router = StartRouter({"p0", "d0"});
  ASSERT_TRUE(WaitUntil([&] { return HttpGet(router.http_port(), "/ready").status == 200; },
                        absl::Seconds(10)));
  ASSERT_TRUE(WaitUntil(
      [&] { return Check(router.grpc_port(), "").status == HealthCheckResponse::SERVING; },
      absl::Seconds(5)));
  EXPECT_EQ(Check(router.grpc_port(), kInference).status, HealthCheckResponse::SERVING);
  EXPECT_EQ(Check(router.admin_port(), "").status, HealthCheckResponse::SERVING);
  EXPECT_EQ(Check(router.admin_port(), kAdmin).status, HealthCheckResponse::SERVING);
  // Each port answers only for the services it serves.
  EXPECT_EQ(Check(router.grpc_port(), kAdmin).code, grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Check(router.admin_port(), kInference).code, grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Check(router.grpc_port(), "no.such.Service").code, grpc::StatusCode::NOT_FOUND);
}

TEST_F(ServeHealthTest, WatchSeesServingThenNotServingWhenTheDrainStarts) {
  ServeProcess& router = StartRouter({"p0", "d0"});
  auto stub = Health::NewStub(
      grpc::CreateChannel(router.grpc_target(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  HealthCheckRequest req;
  req.set_service(kInference);
  std::unique_ptr<grpc::ClientReader<HealthCheckResponse>> reader = stub->Watch(&context, req);
  HealthCheckResponse resp;
  bool serving = false;
  while (!serving && reader->Read(&resp)) serving = resp.status() == HealthCheckResponse::SERVING;
  ASSERT_TRUE(serving);
  router.Signal(SIGTERM);
  ASSERT_TRUE(reader->Read(&resp));
  EXPECT_EQ(resp.status(), HealthCheckResponse::NOT_SERVING);
  context.TryCancel();
  reader->Finish();
  EXPECT_EQ(router.Wait(absl::Seconds(15)), 0);
}

}  // namespace
}  // namespace narwhal::testing
