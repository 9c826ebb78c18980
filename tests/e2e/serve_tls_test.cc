// narwhal-serve with TLS (tls.cert_file, tls.key_file), end to end: with a
// self-signed certificate made at test time, its HTTP, gRPC inference and
// gRPC admin listeners all speak TLS to clients that trust it (and refuse
// plaintext); a config with a missing key file, or one path without the
// other, stops it before anything is bound with a message naming the key
// and the path — and narwhal-check reports the same.
#include <gtest/gtest.h>
#include <grpcpp/grpcpp.h>
#include <httplib.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "narwhal/admin/v1/admin.grpc.pb.h"
#include "narwhal/v1/inference.grpc.pb.h"
#include "tests/e2e/e2e_util.h"
#include "tests/server/tls_test_cert.h"

namespace narwhal::testing {
namespace {

class ServeTlsTest : public E2eTest {
 protected:
  void SetUp() override {
    E2eTest::SetUp();
    signal(SIGPIPE, SIG_IGN);
    auto dir = MakeTempDir("serve_tls_");
    ASSERT_TRUE(dir.ok()) << dir.status();
    dir_ = *dir;
    auto cert = MakeSelfSignedCertificate(dir_);
    ASSERT_TRUE(cert.ok()) << cert.status();
    cert_ = *cert;
  }
  void TearDown() override {
    if (serve_) serve_->Stop();
    serve_.reset();
    E2eTest::TearDown();
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  static json UnreachableFleet(const json& tls) {
    return FleetConfig({{"p0", "http://127.0.0.1:1", "prefill"},
                        {"d0", "http://127.0.0.1:2", "decode"}},
                       {{"tls", tls}});
  }

  std::shared_ptr<grpc::Channel> TlsChannel(int port) const {
    grpc::SslCredentialsOptions options;
    options.pem_root_certs = cert_.cert_pem;
    return grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                               grpc::SslCredentials(options));
  }

  std::string dir_;
  TestCertificate cert_;
  std::unique_ptr<ServeProcess> serve_;
};

TEST_F(ServeTlsTest, ServesHttpGrpcAndAdminOverTls) {
  ServeOptions options;
  options.config =
      FleetConfig({{"p0", SimUrl("p0"), "prefill"}, {"d0", SimUrl("d0"), "decode"}},
                  {{"tls", {{"cert_file", cert_.cert_file}, {"key_file", cert_.key_file}}}});
  auto started = ServeProcess::Start(options);
  ASSERT_TRUE(started.ok()) << started.status();
  serve_ = std::move(*started);

  httplib::SSLClient https("127.0.0.1", serve_->http_port());
  https.set_ca_cert_path(cert_.cert_file);
  https.enable_server_certificate_verification(true);
  https.set_read_timeout(10, 0);
  auto r = https.Post(kCompletions, Completion("Tell me about narwhals", 4, false).dump(),
                      "application/json");
  ASSERT_TRUE(r) << httplib::to_string(r.error()) << serve_->StderrTail();
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_FALSE(ResponseText(r->body).empty()) << r->body;
  auto stream = https.Post(kCompletions, Completion("Tell me about narwhals", 4, true).dump(),
                           "application/json");
  ASSERT_TRUE(stream) << httplib::to_string(stream.error());
  EXPECT_EQ(stream->status, 200);
  EXPECT_TRUE(absl::EndsWith(stream->body, "data: [DONE]\n\n")) << stream->body;

  // Plaintext HTTP gets no answer.
  EXPECT_EQ(HttpGet(serve_->http_port(), "/health").status, 0);

  auto inference = narwhal::v1::Inference::NewStub(TlsChannel(serve_->grpc_port()));
  narwhal::v1::GenerateRequest request;
  request.set_model(kModel);
  request.set_prompt("Tell me about narwhals");
  request.set_max_tokens(4);
  narwhal::v1::CompleteResponse completed;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  const grpc::Status status = inference->Complete(&ctx, request, &completed);
  ASSERT_TRUE(status.ok()) << status.error_message() << serve_->StderrTail();
  EXPECT_EQ(completed.text(), ResponseText(r->body));  // the sims' text is deterministic

  auto admin = narwhal::admin::v1::Admin::NewStub(TlsChannel(serve_->admin_port()));
  narwhal::admin::v1::ListEnginesResponse engines;
  grpc::ClientContext admin_ctx;
  admin_ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  const grpc::Status listed =
      admin->ListEngines(&admin_ctx, narwhal::admin::v1::ListEnginesRequest(), &engines);
  ASSERT_TRUE(listed.ok()) << listed.error_message();
  EXPECT_EQ(engines.engines_size(), 2);

  // Plaintext gRPC is refused on both gRPC listeners.
  for (const int port : {serve_->grpc_port(), serve_->admin_port()}) {
    auto plain = narwhal::admin::v1::Admin::NewStub(grpc::CreateChannel(
        "127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
    grpc::ClientContext plain_ctx;
    plain_ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(3));
    narwhal::admin::v1::ListEnginesResponse ignored;
    EXPECT_EQ(plain->ListEngines(&plain_ctx, narwhal::admin::v1::ListEnginesRequest(), &ignored)
                  .error_code(),
              grpc::StatusCode::UNAVAILABLE)
        << port;
  }
  EXPECT_TRUE(absl::StrContains(serve_->Stderr(), "TLS on the HTTP, gRPC and admin listeners"));
  EXPECT_EQ(serve_->WaitJournalRows(3).size(), 3u);
  EXPECT_EQ(serve_->Stop(), std::optional<int>(0));
}

TEST_F(ServeTlsTest, MissingKeyFileStopsServeAndCheckBeforeBinding) {
  const std::string missing = dir_ + "/missing.key";
  const std::string expected =
      "tls.key_file \"" + missing + "\": cannot read: No such file or directory";
  const json config = UnreachableFleet({{"cert_file", cert_.cert_file}, {"key_file", missing}});
  ExitReport r = ServeProcess::Run({}, config);
  EXPECT_EQ(r.exit_code, std::optional<int>(1)) << r.stderr_text;
  EXPECT_TRUE(absl::StrContains(r.stderr_text, expected)) << r.stderr_text;
  EXPECT_FALSE(absl::StrContains(r.stdout_text, "ready")) << r.stdout_text;
  EXPECT_FALSE(absl::StrContains(r.stderr_text, "bind")) << r.stderr_text;

  // narwhal-check reads the same config the same way.
  const std::string config_path = dir_ + "/fleet.json";
  ASSERT_TRUE(WriteTextFile(config_path, config.dump()));
  const CommandResult check =
      RunCommand({NARWHAL_CHECK_BINARY, "--config", config_path}, absl::Seconds(30));
  EXPECT_EQ(check.exit_code, 1) << check.out << check.err;
  EXPECT_TRUE(absl::StrContains(check.out + check.err, expected)) << check.out << check.err;
}

TEST_F(ServeTlsTest, CertificateWithoutKeyStopsServe) {
  ExitReport r = ServeProcess::Run({}, UnreachableFleet({{"cert_file", cert_.cert_file}}));
  EXPECT_EQ(r.exit_code, std::optional<int>(1)) << r.stderr_text;
  EXPECT_TRUE(absl::StrContains(
      r.stderr_text, "tls.key_file is required with tls.cert_file (both or neither)"))
      << r.stderr_text;
  EXPECT_FALSE(absl::StrContains(r.stdout_text, "ready")) << r.stdout_text;
}

}  // namespace
}  // namespace narwhal::testing
