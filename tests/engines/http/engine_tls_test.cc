// TLS to engines (SPEC §16): BeastEngineClient against real narwhal-sim
// engines serving HTTPS with certificates made at test time by a test CA.
// Both legs and control requests complete over TLS; every certificate or
// handshake failure is an engine fault whose detail says why (OpenSSL's
// verify result); mTLS engines refuse a client without a certificate; and a
// pooled TLS connection serves many legs with one handshake.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "engines/api.h"
#include "engines/engine_client.h"
#include "engines/engine_failure.h"
#include "engines/http/beast_engine_client.h"
#include "engines/http/io_loops.h"
#include "engines/http/tls_client.h"
#include "engines/prefill_result.h"
#include "tests/fakes/blocking_legs.h"
#include "tests/fakes/sim_process.h"
#include "tests/server/tls_test_cert.h"

namespace narwhal::engines {
namespace {

namespace nt = ::narwhal::testing;
using json = nlohmann::json;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using namespace std::chrono_literals;

class Recorder : public DecodeObserver {
 public:
  bool OnEvent(std::string_view, const StreamEvent& event) override {
    text += event.text;
    tokens += event.tokens;
    return true;
  }
  std::string text;
  int tokens = 0;
};

json CompletionBody() {
  return json::parse(R"({"model": "Qwen/Qwen3-0.6B", "prompt": "The capital of France is",
                         "max_tokens": 4, "temperature": 0, "seed": 3, "stream": true})");
}

EngineTlsOptions Tls(std::string ca_file, std::string cert_file = "", std::string key_file = "",
                     std::string server_name = "") {
  return EngineTlsOptions{.ca_file = std::move(ca_file),
                          .cert_file = std::move(cert_file),
                          .key_file = std::move(key_file),
                          .server_name = std::move(server_name)};
}

LegOptions Leg(const std::string& rid) {
  LegOptions o;
  o.backend_request_id = rid;
  o.request_deadline = MonoClock::now() + 60s;
  return o;
}

// The adapter on its own loop, called through the blocking facade.
class Adapter {
 public:
  explicit Adapter(EngineTlsOptions tls) : async_(Options(std::move(tls)), clock_) {}

  PrefillOutcome Prefill(const EngineTarget& producer, const std::string& rid) {
    return sync_.Prefill(producer, Api::kCompletions, CompletionBody(), Leg(rid));
  }
  DecodeOutcome Decode(const EngineTarget& consumer, const PrefillResult& handoff,
                       Recorder& recorder) {
    return sync_.Decode(consumer, handoff, CompletionBody(), true, Leg("rid-d"), recorder);
  }
  ControlResponse Control(const EngineTarget& engine, std::string_view path) {
    return sync_.Control(engine, "GET", path, "", 5);
  }

 private:
  static HttpEngineClientOptions Options(EngineTlsOptions tls) {
    HttpEngineClientOptions o;
    o.first_token_timeout_s = 2;
    o.connect_timeout_s = 5;
    o.tls = std::move(tls);
    return o;
  }
  RealClock clock_;
  IoLoops loops_{1};
  BeastEngineClient async_{HttpEngineClientOptions{}, clock_};
  nt::BlockingLegs sync_{async_, loops_.executor(0)};
};

class EngineTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::string> dir = nt::MakeTempDir("engine-tls-");
    ASSERT_TRUE(dir.ok()) << dir.status();
    dir_ = *dir;
    absl::StatusOr<nt::TestCertificate> ca = nt::MakeTestCa(dir_, "ca");
    absl::StatusOr<nt::TestCertificate> other_ca = nt::MakeTestCa(dir_, "other-ca");
    ASSERT_TRUE(ca.ok() && other_ca.ok());
    ca_ = *ca;
    other_ca_ = *other_ca;
    absl::StatusOr<nt::TestCertificate> server = nt::MakeSignedCertificate(ca_, dir_, "server");
    absl::StatusOr<nt::TestCertificate> client = nt::MakeSignedCertificate(ca_, dir_, "client");
    ASSERT_TRUE(server.ok() && client.ok());
    server_ = *server;
    client_ = *client;
  }

  // A narwhal-sim serving HTTPS with `cert` (and, with `client_ca`,
  // requiring client certificates that CA signed).
  static std::unique_ptr<nt::SimProcess> StartSim(const std::string& id, const std::string& role,
                                                  const nt::TestCertificate& cert,
                                                  const std::string& client_ca = "") {
    std::vector<std::string> args = {
        "--engine-id",    id,           "--role",          role,
        "--threads",      "8",          "--tls-cert-file", cert.cert_file,
        "--tls-key-file", cert.key_file};
    if (!client_ca.empty()) args.insert(args.end(), {"--tls-client-ca-file", client_ca});
    absl::StatusOr<std::unique_ptr<nt::SimProcess>> sim = nt::SimProcess::Start(std::move(args));
    EXPECT_TRUE(sim.ok()) << sim.status();
    return sim.ok() ? std::move(*sim) : nullptr;
  }

  EngineTlsOptions TrustCa() const { return Tls(ca_.cert_file); }

  // The prefill failure against `sim` with `tls`: an engine fault whose
  // detail names the handshake.
  static EngineFailure PrefillFailure(nt::SimProcess& sim, EngineTlsOptions tls) {
    Adapter client(std::move(tls));
    PrefillOutcome out = client.Prefill(EngineTarget{"p0", sim.url()}, "rid-fail");
    EXPECT_FALSE(out.ok());
    return out.ok() ? EngineFailure{} : *out.failure;
  }

  std::string dir_;
  nt::TestCertificate ca_;
  nt::TestCertificate other_ca_;
  nt::TestCertificate server_;
  nt::TestCertificate client_;
};

TEST_F(EngineTlsTest, PrefillAndDecodeStreamOverTls) {
  std::unique_ptr<nt::SimProcess> producer = StartSim("p0", "prefill", server_);
  std::unique_ptr<nt::SimProcess> consumer = StartSim("d0", "decode", server_);
  ASSERT_NE(producer, nullptr);
  ASSERT_NE(consumer, nullptr);
  ASSERT_THAT(producer->url(), StartsWith("https://127.0.0.1:"));
  Adapter client(TrustCa());
  PrefillOutcome prefill = client.Prefill(EngineTarget{"p0", producer->url()}, "rid-p");
  ASSERT_TRUE(prefill.ok()) << prefill.failure->detail;
  Recorder recorder;
  DecodeOutcome decode =
      client.Decode(EngineTarget{"d0", consumer->url()}, *prefill.result, recorder);
  ASSERT_TRUE(decode.ok()) << decode.failure->detail;
  EXPECT_EQ(recorder.tokens, 4);
  EXPECT_FALSE(recorder.text.empty());

  ControlResponse health = client.Control(EngineTarget{"d0", consumer->url()}, "/health");
  EXPECT_EQ(health.status, 200) << health.error;
}

TEST_F(EngineTlsTest, WrongCaIsAnEngineFaultNamingVerification) {
  std::unique_ptr<nt::SimProcess> sim = StartSim("p0", "prefill", server_);
  ASSERT_NE(sim, nullptr);
  const EngineFailure f = PrefillFailure(*sim, Tls(other_ca_.cert_file));
  EXPECT_EQ(f.reason, FailureReason::kEngineUnreachable);
  EXPECT_EQ(f.breaker_class, BreakerClass::kConnection);
  EXPECT_EQ(f.cause, FailureCause::kConnectFailed);
  EXPECT_THAT(f.detail, StartsWith("engine unreachable: TLS handshake with " + sim->url() +
                                   " failed: certificate verify failed ("));
  // Nothing reached the engine.
  absl::StatusOr<json> requests = sim->Requests();
  ASSERT_TRUE(requests.ok()) << requests.status();
  for (const json& r : *requests) EXPECT_NE(r.value("phase", ""), "prefill");

  // The system trust store does not know the test CA either.
  const EngineFailure system = PrefillFailure(*sim, EngineTlsOptions{});
  EXPECT_THAT(system.detail, HasSubstr("certificate verify failed (unable to get local issuer"));

  ControlResponse probe =
      Adapter(Tls(other_ca_.cert_file)).Control(EngineTarget{"p0", sim->url()}, "/health");
  EXPECT_EQ(probe.status, 0);
  EXPECT_THAT(probe.error, HasSubstr("certificate verify failed"));
}

TEST_F(EngineTlsTest, ExpiredCertificateIsAFaultNamingExpiry) {
  nt::LeafOptions past;
  past.not_before_s = -3 * 86400;
  past.not_after_s = -86400;
  absl::StatusOr<nt::TestCertificate> expired =
      nt::MakeSignedCertificate(ca_, dir_, "expired", past);
  ASSERT_TRUE(expired.ok());
  std::unique_ptr<nt::SimProcess> sim = StartSim("p0", "prefill", *expired);
  ASSERT_NE(sim, nullptr);
  const EngineFailure f = PrefillFailure(*sim, TrustCa());
  EXPECT_EQ(f.reason, FailureReason::kEngineUnreachable);
  EXPECT_THAT(f.detail, HasSubstr("failed: certificate verify failed (certificate has expired)"));
}

TEST_F(EngineTlsTest, ServerNameIsVerified) {
  nt::LeafOptions other_name;
  other_name.common_name = "engine.internal";
  other_name.subject_alt_name = "DNS:engine.internal";
  absl::StatusOr<nt::TestCertificate> named =
      nt::MakeSignedCertificate(ca_, dir_, "named", other_name);
  ASSERT_TRUE(named.ok());
  std::unique_ptr<nt::SimProcess> sim = StartSim("p0", "prefill", *named);
  ASSERT_NE(sim, nullptr);
  // The URL's host, 127.0.0.1, is not in the certificate.
  EXPECT_THAT(PrefillFailure(*sim, TrustCa()).detail,
              HasSubstr("certificate verify failed (IP address mismatch)"));
  // Nor is another name.
  EXPECT_THAT(PrefillFailure(*sim, Tls(ca_.cert_file, "", "", "other")).detail,
              HasSubstr("certificate verify failed (hostname mismatch)"));
  // engine.tls.server_name names the one it holds.
  Adapter client(Tls(ca_.cert_file, "", "", "engine.internal"));
  PrefillOutcome ok = client.Prefill(EngineTarget{"p0", sim->url()}, "rid-named");
  EXPECT_TRUE(ok.ok()) << ok.failure->detail;
}

TEST_F(EngineTlsTest, MutualTlsNeedsTheClientCertificate) {
  std::unique_ptr<nt::SimProcess> sim = StartSim("p0", "prefill", server_, ca_.cert_file);
  ASSERT_NE(sim, nullptr);
  // Without a certificate the engine refuses the connection. With TLS 1.3
  // it does so after the client's side of the handshake: the leg sees the
  // alert ("certificate required") when it reads, or a lost connection when
  // it writes first; the detail says which, and points at the certificate.
  const EngineFailure f = PrefillFailure(*sim, TrustCa());
  EXPECT_TRUE(f.reason == FailureReason::kEngineUnreachable ||
              f.reason == FailureReason::kEngineConnection)
      << f.detail;
  EXPECT_THAT(f.detail, ::testing::AnyOf(HasSubstr("certificate required"),
                                         HasSubstr("refuse the client certificate")));
  EXPECT_THAT(f.detail, HasSubstr(sim->url()));

  Adapter client(Tls(ca_.cert_file, client_.cert_file, client_.key_file));
  PrefillOutcome ok = client.Prefill(EngineTarget{"p0", sim->url()}, "rid-mtls");
  EXPECT_TRUE(ok.ok()) << ok.failure->detail;
}

TEST_F(EngineTlsTest, PooledTlsConnectionServesManyLegsWithOneHandshake) {
  std::unique_ptr<nt::SimProcess> sim = StartSim("p0", "prefill", server_);
  ASSERT_NE(sim, nullptr);
  Adapter client(TrustCa());
  constexpr int kLegs = 8;
  for (int i = 0; i < kLegs; ++i) {
    PrefillOutcome out = client.Prefill(EngineTarget{"p0", sim->url()}, "rid-" + std::to_string(i));
    ASSERT_TRUE(out.ok()) << out.failure->detail;
  }
  absl::StatusOr<json> requests = sim->Requests();
  ASSERT_TRUE(requests.ok()) << requests.status();
  std::set<int> connections;
  int prefills = 0;
  for (const json& r : *requests) {
    if (r.value("phase", "") != "prefill") continue;
    ++prefills;
    connections.insert(r.value("peer_port", 0));
  }
  EXPECT_EQ(prefills, kLegs);
  // Sequential legs on one loop: one connection, so one handshake.
  EXPECT_EQ(connections.size(), 1u);
}

TEST_F(EngineTlsTest, PlainEnginesNeedNoTlsAndHttpsToAPlainEngineFails) {
  absl::StatusOr<std::unique_ptr<nt::SimProcess>> plain =
      nt::SimProcess::Start({"--engine-id", "p0", "--role", "prefill", "--threads", "8"});
  ASSERT_TRUE(plain.ok()) << plain.status();
  ASSERT_THAT((*plain)->url(), StartsWith("http://"));
  // A client with engine.tls set reaches plain engines as before.
  Adapter client(TrustCa());
  PrefillOutcome ok = client.Prefill(EngineTarget{"p0", (*plain)->url()}, "rid-plain");
  EXPECT_TRUE(ok.ok()) << ok.failure->detail;
  // https:// to an engine that speaks plain HTTP: a handshake failure.
  std::string https = (*plain)->url();
  https.replace(0, 4, "https");
  PrefillOutcome bad = client.Prefill(EngineTarget{"p0", https}, "rid-mixed");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.failure->reason, FailureReason::kEngineUnreachable);
  EXPECT_THAT(bad.failure->detail, StartsWith("engine unreachable: TLS handshake with " + https));
}

TEST(TlsClientContextTest, CheckNamesTheKeyOfABadFile) {
  EXPECT_EQ(TlsClientContext::Check(EngineTlsOptions{}), "");
  EXPECT_THAT(TlsClientContext::Check(Tls("/nonexistent/ca.pem")),
              StartsWith("engine.tls.ca_file \"/nonexistent/ca.pem\": cannot load"));
  EXPECT_THAT(TlsClientContext::Check(Tls("", "", "/k.pem")),
              HasSubstr("engine.tls.cert_file is required with engine.tls.key_file"));
}

}  // namespace
}  // namespace narwhal::engines
