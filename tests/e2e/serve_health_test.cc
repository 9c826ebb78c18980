// End-to-end tests of narwhal-serve's health: grpc.health.v1.Health (Check
// and Watch, through a real client stub) on the inference and admin ports,
// and /ready, both following readiness: NOT_SERVING until every role has an
// engine that passed a check, SERVING then, NOT_SERVING again once a drain
// starts.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <memory>
#include <string>

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
