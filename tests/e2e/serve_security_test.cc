// End-to-end tests of SPEC §12's security defaults that a client can probe:
// a client `kv_transfer_params` reaches no engine on any leg (breaker
// verification probes included); the router connects only to engines named
// in the config (no client field or header redirects it, and an engine's
// redirect is not followed); and no request content reaches the process
// log, even when every engine fails.
#include <arpa/inet.h>
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "narwhal/v1/inference.grpc.pb.h"
#include "tests/e2e/e2e_util.h"

namespace narwhal::testing {
namespace {

// A loopback port that counts the connections made to it and never answers:
// where a request would go if the router followed a client or an engine.
class ConnectionTrap {
 public:
  ConnectionTrap() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::listen(fd_, 128) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      ADD_FAILURE() << "cannot open the trap listener";
      return;
    }
    port_ = ntohs(addr.sin_port);
  }
  ~ConnectionTrap() {
    if (fd_ >= 0) ::close(fd_);
  }

  int port() const { return port_; }
  std::string url() const { return absl::StrCat("http://127.0.0.1:", port_); }

  // Connections made so far (taken from the backlog).
  int Connections() {
    while (true) {
      const int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) break;
      ::close(c);
      ++connections_;
    }
    return connections_;
  }

 private:
  int fd_ = -1;
  int port_ = 0;
  int connections_ = 0;
};

// An engine that answers every inference request with a redirect to
// `location` (and /health with 200).
class RedirectingEngine {
 public:
  explicit RedirectingEngine(const std::string& location) {
    server_.Get("/health", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("{}", "application/json");
    });
    server_.Post(".*", [location](const httplib::Request&, httplib::Response& res) {
      res.status = 307;
      res.set_header("Location", location + "/v1/completions");
      res.set_content("redirecting", "text/plain");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~RedirectingEngine() {
    server_.stop();
    thread_.join();
  }
  std::string url() const { return absl::StrCat("http://127.0.0.1:", port_); }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
};

bool IsProbe(const json& record) {
  return absl::StrContains(record["body"].dump(), "breaker verification");
}

class ServeSecurityTest : public E2eTest {};

TEST_F(ServeSecurityTest, ClientKvTransferParamsReachNoLegNotEvenAProbe) {
  // One failure holds a decode engine and sends it an inference probe at once.
  ServeProcess& router = StartRouter({"p0", "d0", "d1"}, {{"recovery", {{"eject_after", 1}}}});
  const json client_kv = {{"do_remote_prefill", true},
                          {"remote_engine_id", "evil-engine"},
                          {"remote_block_ids", json::array({1, 2, 3})},
                          {"remote_host", "attacker.example"},
                          {"remote_port", 1}};
  for (const char* iid : {"d0", "d1"}) SetFaults(iid, {{{"kind", "done_before_token"}}});
  HttpCapture failed =
      Send(router, kChat, Chat("kv probe", 3, false, {{"kv_transfer_params", client_kv}}));
  EXPECT_EQ(failed.status, 502) << Describe(failed);
  for (const char* iid : {"d0", "d1"}) ASSERT_TRUE(Sim(iid).ClearFaults().ok());
  // The held engine's verification: a prefill leg and a decode leg.
  ASSERT_TRUE(WaitUntil(
      [&] {
        for (const char* iid : {"d0", "d1"}) {
          for (const json& r : SimRequests(Sim(iid), "decode")) {
            if (IsProbe(r) && !r["end"].is_null()) return true;
          }
        }
        return false;
      },
      absl::Seconds(15)))
      << router.StderrTail();
  HttpCapture ok = Send(router, kCompletions,
                        Completion("kv after", 3, true, {{"kv_transfer_params", client_kv}}));
  EXPECT_EQ(ok.status, 200) << Describe(ok);

  int legs = 0;
  int probes = 0;
  for (const char* iid : {"p0", "d0", "d1"}) {
    for (const json& r : SimRequests(Sim(iid))) {
      ++legs;
      probes += IsProbe(r) ? 1 : 0;
      const std::string body = r["body"].dump();
      EXPECT_FALSE(absl::StrContains(body, "attacker.example")) << iid << ": " << body;
      EXPECT_FALSE(absl::StrContains(body, "evil-engine")) << iid << ": " << body;
    }
  }
  EXPECT_GE(probes, 2);  // the probe's prefill and decode legs
  EXPECT_GE(legs, 5);
}

TEST_F(ServeSecurityTest, ClientFieldsNamingAUrlAreNeverConnectedTo) {
  ConnectionTrap trap;
  ServeProcess& router = StartRouter({"p0", "d0"});
  const json urls = {
      {"base_url", trap.url()},
      {"url", trap.url()},
      {"engine_url", trap.url()},
      {"prefill_url", trap.url()},
      {"decode_url", trap.url()},
      {"kv_transfer_params", {{"remote_host", "127.0.0.1"}, {"remote_port", trap.port()}}}};
  HttpCaptureOptions options;
  options.headers = {{"X-Forwarded-Host", absl::StrCat("127.0.0.1:", trap.port())},
                     {"Forwarded", absl::StrCat("host=127.0.0.1:", trap.port())}};
  for (const bool stream : {false, true}) {
    HttpCapture c = Send(router, kCompletions, Completion("urls", 3, stream, urls), options);
    EXPECT_EQ(c.status, 200) << Describe(c);
  }
  EXPECT_EQ(trap.Connections(), 0);
}

TEST_F(ServeSecurityTest, AnEnginesRedirectIsNotFollowed) {
  ConnectionTrap trap;
  RedirectingEngine redirecting(trap.url());
  // On the prefill leg, then on the decode leg.
  for (const bool prefill : {true, false}) {
    SCOPED_TRACE(prefill ? "prefill" : "decode");
    ServeProcess& router =
        StartRouterWith({{"p", prefill ? redirecting.url() : SimUrl("p0"), "prefill"},
                         {"d", prefill ? SimUrl("d0") : redirecting.url(), "decode"}});
    HttpCapture c = Send(router, kCompletions, Completion("redirect", 3, false));
    EXPECT_EQ(c.status, 502) << Describe(c);
    EXPECT_TRUE(absl::StrContains(ErrorOf(c.body).value("message", ""), "307")) << Describe(c);
  }
  EXPECT_EQ(trap.Connections(), 0);
}

TEST_F(ServeSecurityTest, RequestContentNeverReachesTheProcessLog) {
  const std::string marker = "zq-prompt-marker-7731";
  // A dead engine (refused connections) and live ones that fail every way.
  ConnectionTrap dead;
  const int dead_port = dead.port();
  ServeProcess& router =
      StartRouterWith({{"p0", SimUrl("p0"), "prefill"},
                       {"p1", SimUrl("p1"), "prefill"},
                       {"gone", "http://127.0.0.1:1", "prefill"},
                       {"d0", SimUrl("d0"), "decode"},
                       {"d1", SimUrl("d1"), "decode"},
                       {"silent", absl::StrCat("http://127.0.0.1:", dead_port), "decode"}},
                      {{"recovery", {{"eject_after", 1}, {"readmit_interval_s", 0.2}}},
                       {"engine", {{"first_token_timeout_s", 0.3}, {"connect_timeout_s", 0.3}}}});
  SetFaults("p0", {{{"kind", "http_status"}, {"status", 500}, {"message", "boom"}, {"times", 2}},
                   {{"kind", "drop_connection"}, {"times", 2}}});
  SetFaults("p1", {{{"kind", "no_descriptor"}, {"times", 2}}});
  for (const char* iid : {"d0", "d1"}) {
    SetFaults(iid, {{{"kind", "error_in_stream"}, {"after_tokens", 1}, {"times", 2}},
                    {{"kind", "done_before_token"}, {"times", 2}},
                    {{"kind", "http_status"}, {"status", 400}, {"message", "bad"}, {"times", 2}}});
  }
  const json extra = {{"user", marker}, {"stop", json::array({marker})}};
  for (int i = 0; i < 6; ++i) {
    Send(router, kCompletions, Completion(marker, 3, i % 2 == 0, extra));
    Send(router, kChat, Chat(marker, 3, i % 2 == 1, extra));
  }
  // Refused requests carry it too: malformed, wrong model, over a limit.
  SendRaw(router, kCompletions, "{\"model\":\"" + marker + "\",\"prompt\":\"" + marker);
  Send(router, kCompletions, {{"model", marker}, {"prompt", marker}});
  Send(router, kChat, {{"model", kModel}, {"messages", marker}});
  // And the gRPC door.
  auto stub = narwhal::v1::Inference::NewStub(
      grpc::CreateChannel(router.grpc_target(), grpc::InsecureChannelCredentials()));
  for (int i = 0; i < 3; ++i) {
    narwhal::v1::GenerateRequest request;
    request.set_model(kModel);
    request.set_prompt(marker);
    request.set_max_tokens(3);
    (*request.mutable_extra()->mutable_fields())["user"].set_string_value(marker);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    narwhal::v1::CompleteResponse response;
    stub->Complete(&ctx, request, &response);
    CountRequest(router);
  }
  for (const char* iid : {"p0", "p1", "d0", "d1"}) ASSERT_TRUE(Sim(iid).ClearFaults().ok());
  // Let holds, probes and readmissions run (and log).
  absl::SleepFor(absl::Seconds(1));
  const std::string log = router.Stderr();
  EXPECT_FALSE(log.empty());
  EXPECT_FALSE(absl::StrContains(log, marker)) << router.StderrTail(20000);
  EXPECT_FALSE(absl::StrContains(log, "zq-prompt-marker")) << router.StderrTail(20000);
}

}  // namespace
}  // namespace narwhal::testing
