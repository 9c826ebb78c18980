// The gRPC inference API with TLS (the gRPC door's TlsServerContext, ALPN h2): a client that
// trusts the self-signed certificate made at test time gets its generation
// over a real TLS connection on loopback; a plaintext client and a client
// that does not trust the certificate are refused, and the listener keeps
// serving.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include "engines/http/io_loops.h"
#include "narwhal/v1/inference.grpc.pb.h"
#include "router/common/clock.h"
#include "router/fleet/fleet.h"
#include "router/router.h"
#include "server/net/tls_context.h"
#include "server/tls_files.h"
#include "tests/fakes/fake_engine_client.h"
#include "tests/server/grpc_door_for_test.h"
#include "tests/server/tls_test_cert.h"

namespace narwhal::server {
namespace {

namespace nt = narwhal::testing;
namespace pb = narwhal::v1;
using std::chrono_literals::operator""s;

class GrpcTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto dir = nt::MakeTempDir("grpc_tls_");
    ASSERT_TRUE(dir.ok()) << dir.status();
    dir_ = *dir;
    auto cert = nt::MakeSelfSignedCertificate(dir_);
    ASSERT_TRUE(cert.ok()) << cert.status();
    cert_ = *cert;
    auto pem = LoadTlsFiles(cert_.cert_file, cert_.key_file);
    ASSERT_TRUE(pem.ok()) << pem.status();

    settings_.model = "m";
    settings_.engines.resize(2);
    settings_.engines[0].iid = "p0";
    settings_.engines[0].url = "http://127.0.0.1:1";
    settings_.engines[0].role = router::Role::kPrefill;
    settings_.engines[1].iid = "d0";
    settings_.engines[1].url = "http://127.0.0.1:2";
    settings_.engines[1].role = router::Role::kDecode;
    fleet_ = std::make_unique<router::Fleet>(settings_, clock_, nullptr);
    router_ =
        std::make_unique<router::Router>(settings_, fake_, *fleet_, clock_, nullptr, nullptr, 7);
    auto tls = TlsServerContext::Create(*pem, &registry_, TlsServerContext::Door::kGrpc);
    ASSERT_TRUE(tls.ok()) << tls.status();
    tls_ = std::move(*tls);
    door_ = nt::StartGrpcDoor(settings_, *router_, clock_, loops_, "", &port_, tls_.get());
    ASSERT_NE(door_, nullptr);
    ASSERT_NE(port_, 0);
  }

  void TearDown() override {
    nt::StopGrpcDoor(door_);
    router_.reset();
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  std::string Target() const { return "127.0.0.1:" + std::to_string(port_); }

  std::unique_ptr<pb::Inference::Stub> Stub(std::shared_ptr<grpc::ChannelCredentials> creds) {
    return pb::Inference::NewStub(grpc::CreateChannel(Target(), std::move(creds)));
  }

  std::shared_ptr<grpc::ChannelCredentials> Trusting() const {
    grpc::SslCredentialsOptions options;
    options.pem_root_certs = cert_.cert_pem;
    return grpc::SslCredentials(options);
  }

  static grpc::Status Complete(pb::Inference::Stub& stub, pb::CompleteResponse* response) {
    pb::GenerateRequest request;
    request.set_model("m");
    request.set_prompt("hello");
    request.set_max_tokens(4);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 5s);
    return stub.Complete(&ctx, request, response);
  }

  // narwhal_tls_handshake_failures_total{door="grpc"}, or -1 when absent.
  double HandshakeFailures() {
    for (const prometheus::MetricFamily& family : registry_.Collect()) {
      if (family.name != "narwhal_tls_handshake_failures_total") continue;
      for (const prometheus::ClientMetric& metric : family.metric) {
        for (const prometheus::ClientMetric::Label& label : metric.label) {
          if (label.name == "door" && label.value == "grpc") return metric.counter.value;
        }
      }
    }
    return -1;
  }

  std::string dir_;
  nt::TestCertificate cert_;
  prometheus::Registry registry_;
  router::Settings settings_;
  engines::IoLoops loops_{2};
  router::RealClock clock_;
  nt::FakeEngineClient fake_;
  std::unique_ptr<router::Fleet> fleet_;
  std::unique_ptr<router::Router> router_;
  std::shared_ptr<TlsServerContext> tls_;
  std::unique_ptr<GrpcDoor> door_;
  int port_ = 0;
};

TEST_F(GrpcTlsTest, TrustingClientCompletesOverTls) {
  auto stub = Stub(Trusting());
  pb::CompleteResponse response;
  const grpc::Status status = Complete(*stub, &response);
  ASSERT_TRUE(status.ok()) << status.error_code() << " " << status.error_message();
  EXPECT_EQ(response.text(), "hello world");
  EXPECT_EQ(fake_.prefill_calls().size(), 1u);
}

TEST_F(GrpcTlsTest, PlaintextAndUntrustingClientsAreRefused) {
  pb::CompleteResponse response;
  auto plain = Stub(grpc::InsecureChannelCredentials());
  EXPECT_EQ(Complete(*plain, &response).error_code(), grpc::StatusCode::UNAVAILABLE);
  auto stranger = nt::MakeSelfSignedCertificate(dir_, "stranger");
  ASSERT_TRUE(stranger.ok()) << stranger.status();
  grpc::SslCredentialsOptions other_root;
  other_root.pem_root_certs = stranger->cert_pem;  // trusts another certificate only
  auto untrusting = Stub(grpc::SslCredentials(other_root));
  EXPECT_EQ(Complete(*untrusting, &response).error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_TRUE(fake_.prefill_calls().empty());
  // Both failed handshakes are counted (the door counts once the handshake
  // ended on its side, which may be just after the client gave up).
  const auto until = std::chrono::steady_clock::now() + 5s;
  while (HandshakeFailures() < 2 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_GE(HandshakeFailures(), 2);

  auto stub = Stub(Trusting());
  const grpc::Status status = Complete(*stub, &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
}

}  // namespace
}  // namespace narwhal::server
