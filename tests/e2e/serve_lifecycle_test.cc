// End-to-end tests of narwhal-serve as a process (SPEC §2, §3, §8): graceful
// shutdown, start-up refusals, exit codes and the Prometheus exposition.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "tests/e2e/e2e_util.h"

namespace narwhal::testing {
namespace {

class ServeLifecycleTest : public E2eTest {};

// A listening socket on a free loopback port, held by the test.
class HeldPort {
 public:
  HeldPort() {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (fd_ >= 0 && bind(fd_, reinterpret_cast<sockaddr*>(&addr), len) == 0 &&
        listen(fd_, 4) == 0 && getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      port_ = ntohs(addr.sin_port);
    }
  }
  ~HeldPort() {
    if (fd_ >= 0) close(fd_);
  }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

TEST_F(ServeLifecycleTest, SigtermLetsAnInFlightStreamFinish) {
  ServeProcess& router = StartRouter({"p0", "d0"}, {{"serving", {{"graceful_timeout_s", 10}}}});
  SetFaults("d0",
            json::array({{{"kind", "slow_tokens"}, {"phase", "decode"}, {"interval_ms", 150}}}));
  bool signalled = false;
  bool probed = false;
  HttpResult during_drain;
  HttpCaptureOptions options;
  options.hang_up = [&](const HttpCapture& c) {
    const size_t tokens = TokenEvents(c).size();
    if (!signalled && tokens >= 1) {
      router.Signal(SIGTERM);
      signalled = true;
    }
    if (signalled && !probed && tokens >= 3) {
      // A new request while draining is not served.
      httplib::Client client("127.0.0.1", router.http_port());
      client.set_connection_timeout(std::chrono::seconds(2));
      client.set_read_timeout(std::chrono::seconds(2));
      if (httplib::Result r =
              client.Post(kCompletions, Completion("late", 2, false).dump(), "application/json")) {
        during_drain.status = r->status;
        during_drain.body = r->body;
      }
      probed = true;
    }
    return false;
  };
  HttpCapture c = Send(router, kCompletions, Completion("drain me", 8, true), options);
  ASSERT_TRUE(signalled) << Describe(c);
  EXPECT_EQ(c.status, 200) << Describe(c);
  EXPECT_EQ(TokenEvents(c).size(), 8u) << "the in-flight stream must complete: " << Describe(c);
  EXPECT_TRUE(c.saw_done()) << Describe(c);
  EXPECT_TRUE(during_drain.status == 0 || during_drain.status == 503)
      << "a request arriving during the drain was served: " << during_drain.status << " "
      << during_drain.body;

  const std::optional<int> code = router.Wait(absl::Seconds(20));
  EXPECT_EQ(code, std::optional<int>(0)) << router.StderrTail();
  const std::string rid = Header(c, "x-request-id");
  std::vector<json> rows = router.JournalRowsFor(rid);
  ASSERT_EQ(rows.size(), 1u) << "the drained request's journal row is missing";
  ExpectJournalRowShape(rows[0]);
  EXPECT_EQ(rows[0]["terminal"], "completed");
  EXPECT_EQ(rows[0]["output_tokens"], 8);
}

TEST_F(ServeLifecycleTest, SigtermCutsWhatOutlastsTheGracePeriodWithATerminalError) {
  ServeProcess& router = StartRouter({"p0", "d0"}, {{"serving", {{"graceful_timeout_s", 0.5}}},
                                                    {"engine", {{"decode_read_timeout_s", 30}}}});
  SetFaults("d0",
            json::array({{{"kind", "stall_after_tokens"}, {"phase", "decode"}, {"tokens", 1}}}));
  bool signalled = false;
  absl::Time signalled_at;
  HttpCaptureOptions options;
  options.hang_up = [&](const HttpCapture& c) {
    if (!signalled && TokenEvents(c).size() >= 1) {
      router.Signal(SIGTERM);
      signalled = true;
      signalled_at = absl::Now();
    }
    return false;
  };
  HttpCapture c = Send(router, kCompletions, Completion("outlast the drain", 8, true), options);
  ASSERT_TRUE(signalled) << Describe(c);
  const absl::Duration after_signal = absl::Now() - signalled_at;
  EXPECT_GE(after_signal, absl::Milliseconds(400))
      << "the stream was cut before serving.graceful_timeout_s (0.5 s) ran out";
  EXPECT_LT(after_signal, absl::Seconds(10)) << "the drain did not end the stalled stream";
  EXPECT_FALSE(c.saw_done()) << Describe(c);
  // The client learns why: one terminal error event, not a bare close.
  const json terminal = TerminalErrorEvent(c);
  ASSERT_FALSE(terminal.is_null()) << Describe(c);
  EXPECT_EQ(terminal["code"], 503) << terminal.dump();
  EXPECT_EQ(terminal["message"].get<std::string>().rfind("router shut down", 0), 0u)
      << terminal.dump();
  const std::optional<int> code = router.Wait(absl::Seconds(20));
  EXPECT_EQ(code, std::optional<int>(0)) << router.StderrTail();
  std::vector<json> rows = router.JournalRowsFor(Header(c, "x-request-id"));
  ASSERT_EQ(rows.size(), 1u) << "rows are never lost on SIGTERM";
  // The router's doing, never the client's cancellation.
  EXPECT_EQ(rows[0]["terminal"], "failed") << rows[0].dump();
  EXPECT_EQ(rows[0]["reason"], "shutting_down") << rows[0].dump();
  EXPECT_NE(router.Stderr().find("1 request cut"), std::string::npos) << router.StderrTail();
  // The engine leg was closed.
  std::vector<json> decodes = SimRequests(Sim("d0"), "decode");
  ASSERT_EQ(decodes.size(), 1u);
  EXPECT_FALSE(decodes[0]["end"].is_null()) << decodes[0].dump();
}

TEST_F(ServeLifecycleTest, InvalidConfigExits1NamingTheKeyBeforeBinding) {
  HeldPort held;  // listen.http points here: binding first would fail differently
  ASSERT_GT(held.port(), 0);
  const std::string listen = absl::StrCat("127.0.0.1:", held.port());
  const json good =
      FleetConfig({{"p0", "http://127.0.0.1:1", "prefill"}, {"d0", "http://127.0.0.1:2", "decode"}},
                  {{"listen", {{"http", listen}, {"grpc", listen}, {"admin", listen}}}});
  struct Case {
    std::string name;
    json config;
    std::string key;
  };
  std::vector<Case> cases;
  json c = good;
  c["engine"]["first_token_timeout_s"] = -1;
  cases.push_back({"negative timeout", c, "engine.first_token_timeout_s"});
  c = good;
  c["serving"]["bogus_key"] = 1;
  cases.push_back({"unknown key", c, "serving.bogus_key"});
  c = good;
  c["serving"]["max_attempts"] = "2";
  cases.push_back({"wrong type", c, "serving.max_attempts"});
  c = good;
  c["engines"][0]["url"] = "ftp://nowhere";
  cases.push_back({"bad url", c, "engines[0].url"});
  c = good;
  c.erase("model");
  cases.push_back({"missing model", c, "model"});
  cases.push_back({"not JSON", json("{\"model\": "), "JSON"});

  for (const Case& tc : cases) {
    SCOPED_TRACE(tc.name);
    ExitReport r = ServeProcess::Run({}, tc.config);
    EXPECT_EQ(r.exit_code, std::optional<int>(1)) << r.stderr_text;
    EXPECT_FALSE(absl::StrContains(r.stdout_text, "ready")) << r.stdout_text;
    EXPECT_TRUE(absl::StrContains(r.stderr_text, tc.key))
        << "stderr should name " << tc.key << ": " << r.stderr_text;
    EXPECT_FALSE(absl::StrContains(r.stderr_text, "bind")) << r.stderr_text;
  }
  ExitReport missing = ServeProcess::Run({"--config", "/nonexistent/narwhal-fleet.json"}, nullptr);
  EXPECT_EQ(missing.exit_code, std::optional<int>(1)) << missing.stderr_text;
  EXPECT_FALSE(absl::StrContains(missing.stdout_text, "ready"));
}

TEST_F(ServeLifecycleTest, BadArgumentsExit2) {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--bogus"}, std::vector<std::string>{"--http"},
        std::vector<std::string>{"--http", "no-port-here"},
        std::vector<std::string>{"--grpc", "127.0.0.1:99999"}}) {
    SCOPED_TRACE(args[0] + (args.size() > 1 ? " " + args[1] : ""));
    ExitReport r = ServeProcess::Run(args, nullptr);
    EXPECT_EQ(r.exit_code, std::optional<int>(2)) << r.stderr_text;
    EXPECT_FALSE(absl::StrContains(r.stdout_text, "ready")) << r.stdout_text;
    EXPECT_FALSE(r.stderr_text.empty());
  }
}

// --- metrics (SPEC §8) -----------------------------------------------------------


class ServeMetricsTest : public E2eTest {};

TEST_F(ServeMetricsTest, PromtoolAcceptsTheExpositionAndCountsMatchTheRequests) {
  ServeProcess& router = StartRouter({"p0", "d0"});
  EXPECT_EQ(Send(router, kCompletions, Completion("metrics a", 3, true)).status, 200);
  EXPECT_EQ(Send(router, kCompletions, Completion("metrics b", 3, false)).status, 200);
  EXPECT_EQ(Send(router, kChat, Chat("metrics c", 3, true)).status, 200);
  SetFaults("d0", json::array({{{"kind", "http_status"}, {"phase", "decode"}, {"status", 503}}}));
  EXPECT_EQ(Send(router, kCompletions, Completion("metrics d", 3, false)).status, 502);
  EXPECT_EQ(SendRaw(router, kCompletions, "{oops").status, 400);
  json wrong = Chat("metrics e", 3, false);
  wrong["model"] = "other";
  EXPECT_EQ(Send(router, kChat, wrong).status, 404);
  router.WaitJournalRows(6);

  HttpResult r = HttpGet(router.http_port(), "/metrics");
  ASSERT_EQ(r.status, 200);
  EXPECT_TRUE(absl::StrContains(r.header("Content-Type"), "text/plain"))
      << r.header("Content-Type");
  const std::vector<MetricSample> m = ParseMetrics(r.body);
  auto requests = [&](const std::string& api, const std::string& terminal) {
    return MetricSum(m, "narwhal_requests_total", {{"api", api}, {"terminal", terminal}});
  };
  EXPECT_EQ(requests("completions", "completed"), 2);
  EXPECT_EQ(requests("chat", "completed"), 1);
  EXPECT_EQ(requests("completions", "failed"), 1);
  EXPECT_EQ(requests("completions", "invalid"), 1);
  EXPECT_EQ(requests("chat", "invalid"), 1);
  EXPECT_EQ(MetricSum(m, "narwhal_requests_total"), 6);
  EXPECT_EQ(MetricSum(m, "narwhal_attempt_failures_total", {{"phase", "decode"}}), 1);
  EXPECT_EQ(MetricSum(m, "narwhal_attempt_failures_total", {{"phase", "prefill"}}), 0);
  EXPECT_EQ(MetricSum(m, "narwhal_ttft_seconds_count"), 3);
  EXPECT_EQ(MetricSum(m, "narwhal_first_byte_seconds_count"), 3);
  EXPECT_EQ(MetricSum(m, "narwhal_decode_tokens_total"), 9);
  EXPECT_EQ(MetricSum(m, "narwhal_inflight"), 0);
  for (const char* name :
       {"narwhal_retry_attempts_total", "narwhal_retry_denied_total", "narwhal_retry_credits",
        "narwhal_engine_breaker_streak", "narwhal_engine_quarantined", "narwhal_engine_inflight",
        "narwhal_engine_held", "narwhal_ttft_seconds", "narwhal_first_byte_seconds",
        "narwhal_decode_tokens_total"}) {
    EXPECT_TRUE(absl::StrContains(r.body, absl::StrCat("# TYPE ", name, " ")))
        << name << " is not exposed (SPEC §8)";
  }
  for (const MetricSample& s : m) {
    for (const auto& [label, value] : s.labels) {
      EXPECT_NE(label, "rid") << s.name;
      EXPECT_NE(label, "request_id") << s.name;
    }
  }

  const std::string file = router.scratch_dir() + "/metrics.txt";
  std::ofstream(file) << r.body;
  CommandResult promtool =
      RunShell(absl::StrCat("timeout 60 promtool check metrics < '", file, "' 2>&1"));
  EXPECT_EQ(promtool.exit_code, 0) << promtool.out;
  EXPECT_EQ(promtool.out, "") << "promtool check metrics must report nothing";
}

}  // namespace
}  // namespace narwhal::testing
