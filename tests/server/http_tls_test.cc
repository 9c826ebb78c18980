// The HTTP door with TLS (tls.cert_file / tls.key_file): a real TLS client
// that verifies the door's certificate (self-signed, made at test time) gets
// its completions, streamed and not, on one keep-alive connection; a
// plaintext client, a client that does not trust the certificate and
// clients that stall their handshake are closed — the stalls within the
// header timeout — without a journal row, counted, and the door keeps
// serving.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/net/tls_context.h"
#include "server/tls_files.h"
#include "tests/server/http_door_harness.h"
#include "tests/server/tls_test_cert.h"

namespace narwhal::server::http_door_test {
namespace {

class HttpTlsTest : public HttpDoorTest {
 protected:
  void SetUp() override {
    signal(SIGPIPE, SIG_IGN);  // a client writing to a connection the door closed
    auto dir = nt::MakeTempDir("http_tls_");
    ASSERT_TRUE(dir.ok()) << dir.status();
    dir_ = *dir;
    auto cert = nt::MakeSelfSignedCertificate(dir_);
    ASSERT_TRUE(cert.ok()) << cert.status();
    cert_ = *cert;
    auto pem = LoadTlsFiles(cert_.cert_file, cert_.key_file);
    ASSERT_TRUE(pem.ok()) << pem.status();
    auto context = TlsServerContext::Create(*pem, &registry_);
    ASSERT_TRUE(context.ok()) << context.status();
    tls_ = *context;
  }

  void TearDown() override {
    HttpDoorTest::TearDown();
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  void StartTls(HttpDoorOptions options = FastOptions()) {
    options.tls = tls_;
    Start(options);
  }

  // A client that trusts only the test certificate and checks the name.
  std::unique_ptr<httplib::SSLClient> TrustingClient() const {
    auto client = std::make_unique<httplib::SSLClient>("127.0.0.1", port_);
    client->set_ca_cert_path(cert_.cert_file);
    client->enable_server_certificate_verification(true);
    client->set_keep_alive(true);
    client->set_connection_timeout(5, 0);
    client->set_read_timeout(5, 0);
    return client;
  }

  // narwhal_tls_handshake_failures_total as /metrics shows it (over TLS).
  long long MetricFailures() {
    auto client = TrustingClient();
    auto r = client->Get("/metrics");
    if (!r || r->status != 200) return -1;
    const std::string name = "\nnarwhal_tls_handshake_failures_total{door=\"http\"} ";
    const size_t at = r->body.find(name);
    if (at == std::string::npos) return -1;
    return std::stoll(r->body.substr(at + name.size()));
  }

  std::string dir_;
  nt::TestCertificate cert_;
  std::shared_ptr<TlsServerContext> tls_;
};

TEST_F(HttpTlsTest, VerifiedClientGetsCompletionsOnOneConnection) {
  StartTls();
  auto client = TrustingClient();
  auto r = client->Post("/v1/completions", Completion(false), "application/json");
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["choices"][0]["text"], "hello world");
  EXPECT_FALSE(r->get_header_value("x-request-id").empty());

  fake_.QueueDecode(
      nt::DecodeStep::Stream({nt::CompletionChunk(" a"), nt::CompletionChunk(" b", "stop")}));
  auto stream = client->Post("/v1/completions", Completion(true), "application/json");
  ASSERT_TRUE(stream) << httplib::to_string(stream.error());
  EXPECT_EQ(stream->status, 200);
  EXPECT_EQ(stream->get_header_value("content-type"), "text/event-stream");
  const std::vector<std::string> events = Events(stream->body);
  ASSERT_EQ(events.size(), 3u) << stream->body;
  EXPECT_EQ(events[0], nt::CompletionChunk(" a"));
  EXPECT_EQ(events[1], nt::CompletionChunk(" b", "stop"));
  EXPECT_EQ(events[2], "[DONE]");

  auto health = client->Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  // All three on the one TLS connection.
  EXPECT_EQ(shim_->open_connections(), 1);
  const std::vector<json> rows = JournalRows();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0]["terminal"], "completed");
  EXPECT_EQ(rows[1]["terminal"], "completed");
  EXPECT_EQ(tls_->handshake_failures(), 0u);
}

TEST_F(HttpTlsTest, ClientThatDoesNotTrustTheCertificateIsRefused) {
  StartTls();
  auto stranger = nt::MakeSelfSignedCertificate(dir_, "stranger");
  ASSERT_TRUE(stranger.ok()) << stranger.status();
  httplib::SSLClient client("127.0.0.1", port_);
  client.set_ca_cert_path(stranger->cert_file);  // trusts another certificate only
  client.enable_server_certificate_verification(true);
  client.set_connection_timeout(5, 0);
  auto r = client.Get("/health");
  EXPECT_FALSE(r);
  EXPECT_TRUE(WaitOpenConnections(0));
  EXPECT_TRUE(JournalRows().empty());
  // Under TLS 1.3 the client rejects the certificate after the server's side
  // of the handshake completed: its alert ends the connection, which the
  // door may not count as a failed handshake.
  EXPECT_LE(tls_->handshake_failures(), 1u);
}

TEST_F(HttpTlsTest, PlaintextClientIsClosedAndTheDoorStaysUp) {
  StartTls();
  auto plain = Connect();
  plain->Send(Post("/v1/completions", Completion(false)));
  EXPECT_FALSE(plain->Read(Ms(2000)));  // no HTTP answer, only the end
  EXPECT_EQ(plain->pending().find("HTTP/1."), std::string::npos);
  EXPECT_TRUE(WaitOpenConnections(0));
  EXPECT_EQ(tls_->handshake_failures(), 1u);

  auto client = TrustingClient();
  auto r = client->Post("/v1/completions", Completion(false), "application/json");
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(MetricFailures(), 1);
  // The plaintext request was never read: no row for it.
  EXPECT_EQ(JournalRows().size(), 1u);
}

TEST_F(HttpTlsTest, StalledHandshakeIsClosedAtTheHeaderTimeout) {
  StartTls();  // header timeout 300 ms
  auto silent = Connect();
  // A TLS record header and one byte of a ClientHello, then nothing.
  auto partial = Connect();
  partial->Send(std::string("\x16\x03\x01\x02\x00\x01", 6));
  const auto started = SteadyClock::now();
  EXPECT_TRUE(silent->WaitClosed(Ms(3000)));
  EXPECT_TRUE(partial->WaitClosed(Ms(3000)));
  const auto elapsed = SteadyClock::now() - started;
  EXPECT_GE(elapsed, 250ms);
  EXPECT_LT(elapsed, 2s);
  EXPECT_TRUE(WaitOpenConnections(0));
  EXPECT_EQ(tls_->handshake_failures(), 2u);
  EXPECT_TRUE(JournalRows().empty());
}

TEST_F(HttpTlsTest, IdleKeepAliveConnectionIsClosedAfterItsTimeout) {
  StartTls();  // keep-alive timeout 300 ms
  auto client = TrustingClient();
  ASSERT_TRUE(client->Get("/health"));
  EXPECT_EQ(shim_->open_connections(), 1);
  const auto started = SteadyClock::now();
  EXPECT_TRUE(WaitOpenConnections(0));
  EXPECT_GE(SteadyClock::now() - started, 200ms);
  EXPECT_EQ(tls_->handshake_failures(), 0u);
}

}  // namespace
}  // namespace narwhal::server::http_door_test
