// TLS to engines through narwhal-serve (SPEC §16): a fleet of narwhal-sim
// engines serving HTTPS with certificates a test CA signed at run time. With
// engine.tls.ca_file naming that CA a request over the plaintext HTTP door
// completes with the same answer the plain engines give; with another CA
// the request fails as an engine fault and the journal row and the log name
// the failed certificate verification.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "tests/e2e/e2e_util.h"
#include "tests/server/tls_test_cert.h"

namespace narwhal::testing {
namespace {

class ServeEngineTlsTest : public E2eTest {
 protected:
  void SetUp() override {
    E2eTest::SetUp();
    signal(SIGPIPE, SIG_IGN);
    absl::StatusOr<std::string> dir = MakeTempDir("serve_engine_tls_");
    ASSERT_TRUE(dir.ok()) << dir.status();
    dir_ = *dir;
    absl::StatusOr<TestCertificate> ca = MakeTestCa(dir_, "engines-ca");
    absl::StatusOr<TestCertificate> other_ca = MakeTestCa(dir_, "other-ca");
    ASSERT_TRUE(ca.ok() && other_ca.ok());
    ca_ = *ca;
    other_ca_ = *other_ca;
    absl::StatusOr<TestCertificate> server = MakeSignedCertificate(ca_, dir_, "engine");
    ASSERT_TRUE(server.ok()) << server.status();
    for (const auto& [iid, role] : {std::pair<std::string, std::string>{"tp0", "prefill"},
                                    std::pair<std::string, std::string>{"td0", "decode"}}) {
      absl::StatusOr<std::unique_ptr<SimProcess>> sim = SimProcess::Start(
          {"--engine-id", iid, "--role", role, "--threads", "16", "--tls-cert-file",
           server->cert_file, "--tls-key-file", server->key_file});
      ASSERT_TRUE(sim.ok()) << sim.status();
      sims_.push_back(std::move(*sim));
    }
  }
  void TearDown() override {
    E2eTest::TearDown();
    sims_.clear();
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  ServeProcess& StartTlsRouter(const std::string& ca_file) {
    return StartRouterWith(
        {{"tp0", sims_[0]->url(), "prefill"}, {"td0", sims_[1]->url(), "decode"}},
        {{"engine", {{"tls", {{"ca_file", ca_file}}}}}});
  }

  std::string dir_;
  TestCertificate ca_;
  TestCertificate other_ca_;
  std::vector<std::unique_ptr<SimProcess>> sims_;
};

TEST_F(ServeEngineTlsTest, RequestCompletesOverHttpsEnginesWithThePlainAnswer) {
  ASSERT_EQ(sims_[0]->url().rfind("https://", 0), 0u);
  const json body = Completion("Engines behind TLS answer the same", 6, false);
  ServeProcess& plain = StartRouter({"p0", "d0"});
  HttpCapture expected = Send(plain, kCompletions, body);
  ASSERT_EQ(expected.status, 200) << Describe(expected);

  ServeProcess& router = StartTlsRouter(ca_.cert_file);
  HttpCapture c = Send(router, kCompletions, body);
  ASSERT_EQ(c.status, 200) << Describe(c) << router.StderrTail();
  EXPECT_EQ(ResponseText(c.body), ResponseText(expected.body));
  EXPECT_FALSE(ResponseText(c.body).empty());
  EXPECT_EQ(SimRequests(*sims_[0], "prefill").size(), 1u);
  EXPECT_EQ(SimRequests(*sims_[1], "decode").size(), 1u);
  const json row = JournalRow(router, c);
  EXPECT_EQ(row["terminal"], "completed") << row.dump();
}

TEST_F(ServeEngineTlsTest, WrongCaFailsAsAnEngineFaultNamingVerification) {
  ServeProcess& router = StartTlsRouter(other_ca_.cert_file);
  HttpCapture c = Send(router, kCompletions, Completion("Untrusted engines", 4, false));
  EXPECT_GE(c.status, 500) << Describe(c);
  EXPECT_TRUE(SimRequests(*sims_[0], "prefill").empty());
  const json row = JournalRow(router, c);
  EXPECT_NE(row["terminal"], "completed") << row.dump();
  const std::string needle =
      "TLS handshake with " + sims_[0]->url() + " failed: certificate verify failed (";
  const bool in_row = row.dump().find(needle) != std::string::npos;
  const bool in_log = router.Stderr().find(needle) != std::string::npos;
  EXPECT_TRUE(in_row || in_log) << row.dump() << router.StderrTail();
}

}  // namespace
}  // namespace narwhal::testing
