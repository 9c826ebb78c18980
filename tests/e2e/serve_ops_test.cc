// End-to-end tests of narwhal-serve's operability surface: --log-level and
// --log-format with one line per fleet state change, process_* and
// narwhal_build_info on /metrics, and the client's request id (HTTP
// X-Request-Id, gRPC x-request-id metadata) echoed, journaled and carried
// to the engines.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <ctime>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "version/build_info.h"
#include "narwhal/admin/v1/admin.grpc.pb.h"
#include "narwhal/v1/inference.grpc.pb.h"
#include "tests/e2e/e2e_util.h"

namespace narwhal::testing {
namespace {

constexpr char kCompletions[] = "/v1/completions";

class ServeOpsTest : public E2eTest {
 protected:
  ServeProcess& StartWithArgs(
      const std::vector<std::tuple<std::string, std::string, std::string>>& engines,
      std::vector<std::string> args) {
    ServeOptions options;
    options.config = FleetConfig(engines);
    options.args = std::move(args);
    absl::StatusOr<std::unique_ptr<ServeProcess>> serve = ServeProcess::Start(options);
    if (!serve.ok()) {
      ADD_FAILURE() << "cannot start narwhal-serve: " << serve.status();
      std::abort();
    }
    routers_.push_back(std::move(*serve));
    sent_[routers_.back().get()] = 0;
    return *routers_.back();
  }
};

std::vector<json> JsonLines(const std::string& text) {
  std::vector<json> out;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    out.push_back(json::parse(line, nullptr, false));
  }
  return out;
}

// --------------------------------------------------------------------- logs

TEST_F(ServeOpsTest, JsonLogsNameEveryFleetChangeWithItsCause) {
  ServeProcess& router = StartWithArgs({{"p0", SimUrl("p0"), "prefill"},
                                        {"d0", SimUrl("d0"), "decode"},
                                        {"dead", "http://127.0.0.1:1", "decode"}},
                                       {"--log-format", "json", "--log-level", "debug"});
  // An operator ejection.
  auto admin = narwhal::admin::v1::Admin::NewStub(
      grpc::CreateChannel(router.admin_address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  narwhal::admin::v1::EjectEngineRequest eject;
  eject.set_iid("d0");
  eject.set_reason("maintenance window");
  narwhal::admin::v1::Engine engine;
  ASSERT_TRUE(admin->EjectEngine(&context, eject, &engine).ok());

  bool ejected = false, dead_named = false;
  ASSERT_TRUE(WaitUntil(
      [&] {
        const std::vector<json> lines = JsonLines(router.Stderr());
        for (const json& l : lines) {
          if (!l.is_object()) continue;
          const std::string msg = l.value("msg", "");
          ejected |= msg == "fleet: engine_ejected d0" && l.value("cause", "") == "operator" &&
                     l.value("detail", "") == "maintenance window" &&
                     l.value("level", "") == "warn";
          // The unreachable engine: its address and the cause.
          dead_named |= absl::StrContains(msg, "engine dead (http://127.0.0.1:1)") &&
                        absl::StrContains(msg, "127.0.0.1:1: connection refused");
        }
        return ejected && dead_named;
      },
      absl::Seconds(10)))
      << router.Stderr();
  // Every line is one JSON object with a timestamp, a level and a message.
  for (const json& l : JsonLines(router.Stderr())) {
    ASSERT_TRUE(l.is_object()) << router.Stderr();
    EXPECT_TRUE(l.contains("ts") && l.contains("level") && l.contains("msg")) << l.dump();
  }
}

TEST_F(ServeOpsTest, LogLevelDropsLessSevereLines) {
  ServeProcess& router = StartWithArgs(
      {{"p0", SimUrl("p0"), "prefill"}, {"d0", SimUrl("d0"), "decode"}}, {"--log-level", "error"});
  ASSERT_TRUE(WaitUntil([&] { return HttpGet(router.http_port(), "/ready").status == 200; },
                        absl::Seconds(10)));
  EXPECT_FALSE(absl::StrContains(router.Stderr(), " INFO ")) << router.Stderr();
  EXPECT_FALSE(absl::StrContains(router.Stderr(), " WARN ")) << router.Stderr();
}

TEST_F(ServeOpsTest, BadLogFlagsAreRefused) {
  for (const std::vector<std::string>& args : {std::vector<std::string>{"--log-level", "verbose"},
                                               std::vector<std::string>{"--log-format", "xml"}}) {
    const ExitReport r = ServeProcess::Run(args, nullptr, absl::Seconds(10));
    EXPECT_EQ(r.exit_code, 2) << r.stderr_text;
    EXPECT_TRUE(absl::StrContains(r.stderr_text, args[0])) << r.stderr_text;
  }
}

// ------------------------------------------------------------------ metrics

TEST_F(ServeOpsTest, ProcessAndBuildInfoSeries) {
  ServeProcess& router = StartRouter({"p0", "d0"});
  const std::vector<MetricSample> m = Metrics(router);
  auto value = [&](const std::string& name) { return MetricSum(m, name); };
  EXPECT_GT(value("process_cpu_seconds_total"), 0);
  EXPECT_GT(value("process_resident_memory_bytes"), 1 << 20);
  EXPECT_GT(value("process_virtual_memory_bytes"), value("process_resident_memory_bytes"));
  EXPECT_GT(value("process_open_fds"), 3);
  EXPECT_GE(value("process_max_fds"), value("process_open_fds"));
  const double start = value("process_start_time_seconds");
  const double now = static_cast<double>(std::time(nullptr));
  EXPECT_LE(start, now + 1);
  EXPECT_GT(start, now - 120);
  EXPECT_EQ(
      MetricSum(m, "narwhal_build_info", {{"version", BuildVersion()}, {"commit", BuildCommit()}}),
      1);
}

// --------------------------------------------------------- request identity

std::string HeaderOf(const json& record, const std::string& name) {
  for (const auto& [key, value] : record["headers"].items()) {
    if (absl::EqualsIgnoreCase(key, name) && value.is_string()) return value.get<std::string>();
  }
  return "";
}

TEST_F(ServeOpsTest, ClientRequestIdIsEchoedJournaledAndCarriedToEachLeg) {
  ServeProcess& router = StartRouter({"p0", "d0"});
  HttpCaptureOptions options;
  options.headers = {{"X-Request-Id", "trace-42.a"}};
  for (const bool stream : {false, true}) {
    HttpCapture c = Send(router, kCompletions, Completion("identity", 3, stream), options);
    ASSERT_EQ(c.status, 200) << Describe(c);
    EXPECT_EQ(Header(c, "x-client-request-id"), "trace-42.a");
    const std::string rid = Header(c, "x-request-id");
    EXPECT_EQ(rid.size(), 32u) << rid;  // the router's own id either way
    const json row = JournalRow(router, c);
    EXPECT_EQ(row["client_rid"], "trace-42.a");
  }
  for (const char* iid : {"p0", "d0"}) {
    const std::vector<json> legs = SimRequests(Sim(iid), iid[0] == 'p' ? "prefill" : "decode");
    ASSERT_EQ(legs.size(), 2u) << iid;
    for (const json& leg : legs) {
      EXPECT_TRUE(absl::EndsWith(HeaderOf(leg, "x-request-id"), ".trace-42.a"))
          << leg["headers"].dump();
    }
  }
}

TEST_F(ServeOpsTest, InsaneClientRequestIdIsDropped) {
  ServeProcess& router = StartRouter({"p0", "d0"});
  for (const std::string& bad :
       {std::string("has space"), std::string(129, 'a'), std::string("quote\"d")}) {
    HttpCaptureOptions options;
    options.headers = {{"X-Request-Id", bad}};
    HttpCapture c = Send(router, kCompletions, Completion("identity", 2, false), options);
    ASSERT_EQ(c.status, 200) << Describe(c);
    EXPECT_EQ(Header(c, "x-client-request-id"), "");
    EXPECT_FALSE(Header(c, "x-request-id").empty());
    EXPECT_TRUE(JournalRow(router, c)["client_rid"].is_null());
  }
}

TEST_F(ServeOpsTest, GrpcMetadataRequestIdIsEchoedAndJournaled) {
  ServeProcess& router = StartRouter({"p0", "d0"});
  auto stub = narwhal::v1::Inference::NewStub(
      grpc::CreateChannel(router.grpc_target(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.AddMetadata("x-request-id", "grpc-trace-7");
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  narwhal::v1::GenerateRequest req;
  req.set_model(kModel);
  req.set_prompt("identity over gRPC");
  req.set_max_tokens(2);
  narwhal::v1::CompleteResponse resp;
  CountRequest(router);
  ASSERT_TRUE(stub->Complete(&context, req, &resp).ok());
  const auto& md = context.GetServerInitialMetadata();
  auto echoed = md.find("x-client-request-id");
  ASSERT_NE(echoed, md.end());
  EXPECT_EQ(std::string(echoed->second.data(), echoed->second.size()), "grpc-trace-7");
  auto own = md.find("x-request-id");
  ASSERT_NE(own, md.end());
  const std::string rid(own->second.data(), own->second.size());
  EXPECT_EQ(JournalRowFor(router, rid)["client_rid"], "grpc-trace-7");
}

}  // namespace
}  // namespace narwhal::testing
