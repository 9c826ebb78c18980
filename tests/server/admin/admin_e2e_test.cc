// The admin API end to end (SPEC §2, §7): the real narwhal-serve binary,
// its ready line, buf curl through server reflection (no proto files),
// preflight at start-up and on demand (B18), the admin token, and graceful
// shutdown of WatchEvents streams.
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "narwhal/admin/v1/admin.grpc.pb.h"
#include "tests/fakes/command.h"
#include "tests/fakes/serve_process.h"
#include "tests/fakes/sim_process.h"

namespace narwhal::testing {
namespace {

namespace pb = narwhal::admin::v1;

std::string Buf() { return NARWHAL_BUF_BINARY; }

// narwhal-serve with exactly `args` (no journal; loopback listeners on port
// 0 unless `args` names them), ready.
std::unique_ptr<ServeProcess> StartServe(std::vector<std::string> args,
                                         const std::map<std::string, std::string>& env = {}) {
  ServeOptions options;
  options.journal = false;
  options.args = std::move(args);
  for (const auto& [k, v] : env) options.env.emplace_back(k, v);
  options.ready_timeout = absl::Seconds(90);
  auto serve = ServeProcess::Start(std::move(options));
  EXPECT_TRUE(serve.ok()) << serve.status();
  return serve.ok() ? std::move(*serve) : nullptr;
}

// buf curl against the admin listener: `method` of narwhal.admin.v1.Admin
// with JSON `data`, or a bare flag such as --list-services.
CommandResult BufCurl(const ServeProcess& serve, const std::string& method,
                      const std::string& data = "", std::vector<std::string> extra = {}) {
  std::vector<std::string> argv = {Buf(), "curl", "--protocol", "grpc", "--http2-prior-knowledge"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  if (method.rfind("--", 0) == 0) {
    argv.push_back(method);
    argv.push_back(serve.admin_url());
  } else {
    argv.push_back(serve.admin_url() + "/narwhal.admin.v1.Admin/" + method);
    if (!data.empty()) {
      argv.push_back("-d");
      argv.push_back(data);
    }
  }
  return RunCommand(argv, absl::Seconds(120));
}

nlohmann::json ParseOutput(const CommandResult& r) {
  EXPECT_EQ(r.exit_code, 0) << r.err;
  try {
    return nlohmann::json::parse(r.out);
  } catch (const nlohmann::json::exception& e) {
    ADD_FAILURE() << "not JSON: " << r.out << "\n" << r.err;
    return nlohmann::json();
  }
}

class AdminEndToEndTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(access(Buf().c_str(), X_OK), 0)
        << Buf() << " is missing: run deploy/install-deps.sh (npm install in tests/clients)";
  }
};

TEST_F(AdminEndToEndTest, ReadyLineNamesEveryListenerWithItsActualPort) {
  auto serve = StartServe({});
  ASSERT_TRUE(serve);
  EXPECT_EQ(serve->ready_line(),
            "narwhal-serve ready http=127.0.0.1:" + std::to_string(serve->http_port()) +
                " grpc=127.0.0.1:" + std::to_string(serve->grpc_port()) +
                " admin=127.0.0.1:" + std::to_string(serve->admin_port()));
  EXPECT_GT(serve->http_port(), 0);
  EXPECT_GT(serve->grpc_port(), 0);
  EXPECT_GT(serve->admin_port(), 0);
  EXPECT_NE(serve->admin_port(), serve->grpc_port());
  EXPECT_NE(serve->admin_port(), serve->http_port());
}

TEST_F(AdminEndToEndTest, BufCurlFindsTheAdminServiceByReflection) {
  auto serve = StartServe({});
  ASSERT_TRUE(serve);
  CommandResult services = BufCurl(*serve, "--list-services");
  ASSERT_EQ(services.exit_code, 0) << services.err;
  EXPECT_NE(services.out.find("narwhal.admin.v1.Admin"), std::string::npos) << services.out;
  CommandResult methods = BufCurl(*serve, "--list-methods");
  ASSERT_EQ(methods.exit_code, 0) << methods.err;
  for (const char* m : {"ListEngines", "GetEngine", "GetBreakers", "ListQuarantine", "RunPreflight",
                        "GetPreflightReport", "EjectEngine", "ReadmitEngine", "DrainEngine",
                        "ReleaseQuarantine", "WatchEvents", "GetConfig"}) {
    EXPECT_NE(methods.out.find(std::string("narwhal.admin.v1.Admin/") + m), std::string::npos)
        << m << " missing from\n"
        << methods.out;
  }
}

TEST_F(AdminEndToEndTest, ReflectionV1DescribesTheAdminService) {
  auto serve = StartServe({});
  ASSERT_TRUE(serve);
  CommandResult methods = BufCurl(*serve, "--list-methods", "", {"--reflect-protocol", "grpc-v1"});
  ASSERT_EQ(methods.exit_code, 0) << methods.err;
  EXPECT_NE(methods.out.find("narwhal.admin.v1.Admin/ListEngines"), std::string::npos)
      << methods.out;
  const nlohmann::json list =
      ParseOutput(BufCurl(*serve, "ListEngines", "", {"--reflect-protocol", "grpc-v1"}));
  ASSERT_TRUE(list.contains("engines")) << list.dump(2);
  EXPECT_EQ(list["engines"].size(), 4u);
}

TEST_F(AdminEndToEndTest, BufCurlListEnginesAndGetConfigWithoutProtoFiles) {
  auto serve = StartServe({});
  ASSERT_TRUE(serve);
  const nlohmann::json list = ParseOutput(BufCurl(*serve, "ListEngines"));
  ASSERT_TRUE(list.contains("engines")) << list.dump(2);
  std::vector<std::string> iids;
  for (const nlohmann::json& e : list["engines"]) {
    iids.push_back(e.value("iid", ""));
    EXPECT_EQ(e.value("state", ""), "serving") << e.dump();
    EXPECT_EQ(e["streak"].size(), 7u) << e.dump();
    EXPECT_EQ(e.value("url", "").rfind("http://127.0.0.1:", 0), 0u) << e.dump();
  }
  EXPECT_EQ(iids, (std::vector<std::string>{"p0", "p1", "d0", "d1"}));

  const nlohmann::json config = ParseOutput(BufCurl(*serve, "GetConfig"));
  EXPECT_EQ(config["model"], "Qwen/Qwen3-0.6B") << config.dump(2);
  EXPECT_EQ(config["listen"]["admin"], "127.0.0.1:0");
  EXPECT_EQ(config["engines"].size(), 4u);

  const nlohmann::json engine =
      ParseOutput(BufCurl(*serve, "EjectEngine", R"({"iid":"d1","reason":"maintenance"})"));
  EXPECT_EQ(engine["state"], "ejected") << engine.dump(2);
  EXPECT_EQ(engine["ejection"]["cause"], "operator");
  const CommandResult missing = BufCurl(*serve, "GetEngine", R"({"iid":"nope"})");
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.err.find("not_found"), std::string::npos) << missing.err;
}

TEST_F(AdminEndToEndTest, StartupPreflightIsKeptAndRunPreflightReplacesIt) {
  auto serve = StartServe({"--preflight"});
  ASSERT_TRUE(serve);
  const nlohmann::json startup = ParseOutput(BufCurl(*serve, "GetPreflightReport"));
  EXPECT_EQ(startup["passed"], true) << startup.dump(2);
  EXPECT_EQ(startup["trigger"], "startup");
  EXPECT_EQ(startup["transfers"].size(), 4u);  // 2 producers x 2 consumers, mesh
  EXPECT_NE(serve->Stderr().find("preflight passed"), std::string::npos) << serve->Stderr();

  const nlohmann::json ran =
      ParseOutput(BufCurl(*serve, "RunPreflight", R"({"pairs":"PAIRS_RING"})"));
  EXPECT_EQ(ran["passed"], true) << ran.dump(2);
  EXPECT_EQ(ran["trigger"], "admin");
  EXPECT_EQ(ran["pairs"], "PAIRS_RING");
  std::vector<std::string> gates;
  for (const nlohmann::json& g : ran["gates"]) {
    gates.push_back(g.value("name", ""));
    EXPECT_EQ(g.value("passed", false), true) << g.dump();
  }
  EXPECT_EQ(gates, (std::vector<std::string>{"reach", "contract", "model", "produce", "consume"}));
  for (const nlohmann::json& t : ran["transfers"]) {
    EXPECT_EQ(t.value("outcome", ""), "passed") << t.dump();
    EXPECT_GT(t.value("durationS", 0.0), 0) << t.dump();
  }

  const nlohmann::json last = ParseOutput(BufCurl(*serve, "GetPreflightReport"));
  EXPECT_EQ(last["trigger"], "admin");
  EXPECT_EQ(last["startedAt"], ran["startedAt"]);
}

TEST_F(AdminEndToEndTest, GetPreflightReportBeforeAnyIsFailedPrecondition) {
  auto serve = StartServe({});
  ASSERT_TRUE(serve);
  const CommandResult r = BufCurl(*serve, "GetPreflightReport");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("failed_precondition"), std::string::npos) << r.err;
}

// A fleet file for two narwhal-sim engines.
std::string WriteConfig(const std::string& prefill_url, const std::string& decode_url,
                        const nlohmann::json& extra) {
  nlohmann::json config = {{"model", "Qwen/Qwen3-0.6B"},
                           {"engines",
                            {{{"iid", "p0"}, {"url", prefill_url}, {"role", "prefill"}},
                             {{"iid", "d0"}, {"url", decode_url}, {"role", "decode"}}}},
                           {"engine", {{"first_token_timeout_s", 0.5}}}};
  config.update(extra);
  char path[] = "/tmp/narwhal-admin-fleet-XXXXXX";
  const int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  close(fd);
  std::ofstream(path) << config.dump(2);
  return path;
}

// A listening socket on a free loopback port, held for the test.
class HeldPort {
 public:
  HeldPort() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 && listen(fd_, 1) == 0 &&
        getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      port_ = ntohs(addr.sin_port);
    }
  }
  ~HeldPort() { close(fd_); }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

TEST_F(AdminEndToEndTest, PreflightFlagExitsOneBeforeBindingWhenDecodeNeverStarts) {
  auto p0 = SimProcess::Start({"--engine-id", "p0", "--role", "prefill"});
  auto d0 = SimProcess::Start({"--engine-id", "d0", "--role", "decode"});
  ASSERT_TRUE(p0.ok() && d0.ok());
  ASSERT_TRUE((*d0)
                  ->SetFaults(nlohmann::json::parse(
                      R"({"faults":[{"kind":"silent_before_first_token",
                                                  "phase":"decode","times":-1}]})"))
                  .ok());
  // Every listener's port is taken: binding any of them before preflight
  // would fail with a bind error instead.
  HeldPort http, grpc, admin;
  ASSERT_GT(http.port(), 0);
  const std::string config = WriteConfig(
      (*p0)->url(), (*d0)->url(),
      {{"listen",
        {{"http", http.address()}, {"grpc", grpc.address()}, {"admin", admin.address()}}}});
  const ExitReport run =
      ServeProcess::Run({"--config", config, "--preflight"}, nullptr, absl::Seconds(120));
  unlink(config.c_str());
  ASSERT_TRUE(run.exit_code.has_value()) << "narwhal-serve --preflight did not exit";
  EXPECT_EQ(*run.exit_code, 1);
  const std::string& err = run.stderr_text;
  EXPECT_EQ(run.stdout_text, "");
  EXPECT_NE(err.find("preflight failed"), std::string::npos) << err;
  EXPECT_NE(err.find("unconfirmed_transfer"), std::string::npos) << err;
  EXPECT_EQ(err.find("cannot bind"), std::string::npos) << err;
}

TEST_F(AdminEndToEndTest, AdminTokenFromTheEnvironmentIsRequired) {
  auto p0 = SimProcess::Start({"--engine-id", "p0", "--role", "prefill"});
  auto d0 = SimProcess::Start({"--engine-id", "d0", "--role", "decode"});
  ASSERT_TRUE(p0.ok() && d0.ok());
  const std::string config = WriteConfig((*p0)->url(), (*d0)->url(),
                                         {{"admin", {{"token_env", "NARWHAL_TEST_ADMIN_TOKEN"}}}});
  auto serve = StartServe({"--config", config}, {{"NARWHAL_TEST_ADMIN_TOKEN", "t0ken"}});
  unlink(config.c_str());
  ASSERT_TRUE(serve);
  const CommandResult refused = BufCurl(*serve, "ListEngines");
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.err.find("unauthenticated"), std::string::npos) << refused.err;
  const CommandResult wrong =
      BufCurl(*serve, "ListEngines", "", {"-H", "Authorization: Bearer nope"});
  EXPECT_NE(wrong.exit_code, 0);
  EXPECT_NE(wrong.err.find("unauthenticated"), std::string::npos) << wrong.err;
  const nlohmann::json list =
      ParseOutput(BufCurl(*serve, "ListEngines", "", {"-H", "Authorization: Bearer t0ken"}));
  EXPECT_EQ(list["engines"].size(), 2u) << list.dump(2);
}

TEST_F(AdminEndToEndTest, SigtermEndsWatchEventsStreamsAndExitsZero) {
  auto serve = StartServe({});
  ASSERT_TRUE(serve);
  auto channel = grpc::CreateChannel(serve->admin_address(), grpc::InsecureChannelCredentials());
  auto stub = pb::Admin::NewStub(channel);
  {
    grpc::ClientContext context;
    pb::DrainEngineRequest request;
    request.set_iid("p1");
    pb::Engine engine;
    ASSERT_TRUE(stub->DrainEngine(&context, request, &engine).ok());
  }
  grpc::ClientContext context;
  pb::WatchEventsRequest request;
  request.set_since_seq(0);
  auto reader = stub->WatchEvents(&context, request);
  pb::Event event;
  bool drained = false;
  while (!drained && reader->Read(&event)) drained = event.kind() == "engine_drained";
  ASSERT_TRUE(drained);
  EXPECT_EQ(event.iid(), "p1");

  const auto start = std::chrono::steady_clock::now();
  serve->Signal(SIGTERM);
  while (reader->Read(&event)) {
  }
  const grpc::Status s = reader->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
  const std::optional<int> code = serve->Wait(absl::Seconds(30));
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(*code, 0) << serve->StderrTail();
}

}  // namespace
}  // namespace narwhal::testing
