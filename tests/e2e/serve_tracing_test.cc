// Span export through narwhal-serve (SPEC §16, tracing.otlp_endpoint) to an
// OTLP/HTTP receiver on loopback that decodes the JSON it gets: the request's
// span continues the client's trace (HTTP header or gRPC metadata) or one
// the router starts, with one child per phase, and each leg's span has the
// id its engine (a real narwhal-sim) received in traceparent.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "narwhal/v1/inference.grpc.pb.h"
#include "tests/e2e/e2e_util.h"

namespace narwhal::testing {
namespace {

// Keeps every span POSTed to /v1/traces.
class OtlpReceiver {
 public:
  OtlpReceiver() {
    server_.Post("/v1/traces", [this](const httplib::Request& req, httplib::Response& res) {
      const json doc = json::parse(req.body, nullptr, false);
      std::lock_guard<std::mutex> lock(mu_);
      if (doc.is_object()) {
        for (const json& rs : doc["resourceSpans"]) {
          for (const json& ss : rs["scopeSpans"]) {
            for (const json& s : ss["spans"]) spans_.push_back(s);
          }
        }
      }
      res.set_content("{}", "application/json");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~OtlpReceiver() {
    server_.stop();
    thread_.join();
  }
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  // The spans of `trace_id`.
  std::vector<json> Trace(const std::string& trace_id) {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<json> out;
    for (const json& s : spans_) {
      if (s.value("traceId", "") == trace_id) out.push_back(s);
    }
    return out;
  }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::vector<json> spans_;
};

std::map<std::string, json> AttributesOf(const json& span) {
  std::map<std::string, json> out;
  for (const json& a : span["attributes"]) out[a["key"]] = a["value"];
  return out;
}

// The traceparent span id the leg's engine received.
std::string LegSpan(const json& leg) {
  return leg["headers"].value("traceparent", "").substr(36, 16);
}

class ServeTracingTest : public E2eTest {};

TEST_F(ServeTracingTest, EachRequestsSpansReachTheReceiverWithTheLegsIdsAsTheEnginesSawThem) {
  OtlpReceiver receiver;
  ServeProcess& router = StartRouter(
      {"p0", "d0"},
      {{"tracing", {{"otlp_endpoint", receiver.endpoint()}, {"export_interval_s", 0.05}}}});

  // HTTP, continuing the client's sampled trace.
  const std::string http_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
  HttpCapture c = Send(router, kCompletions, Completion("traced prompt", 3, true),
                       WithHeaders({{"traceparent", "00-" + http_trace + "-00f067aa0ba902b7-01"}}));
  ASSERT_EQ(c.status, 200) << Describe(c);
  ASSERT_TRUE(WaitUntil([&] { return receiver.Trace(http_trace).size() == 5; }, absl::Seconds(10)))
      << receiver.Trace(http_trace).size();
  const std::vector<json> spans = receiver.Trace(http_trace);
  const json* root = nullptr;
  std::map<std::string, json> by_name;
  for (const json& s : spans) {
    if (s.value("parentSpanId", "") == "00f067aa0ba902b7") root = &s;
    by_name[s["name"]] = s;
  }
  ASSERT_NE(root, nullptr) << json(spans).dump();
  EXPECT_EQ((*root)["name"], std::string("text_completion ") + kModel);
  EXPECT_EQ((*root)["kind"], 2);
  const auto attributes = AttributesOf(*root);
  EXPECT_EQ(attributes.at("http.response.status_code"), json({{"intValue", "200"}}));
  EXPECT_EQ(attributes.at("gen_ai.usage.output_tokens"), json({{"intValue", "3"}}));
  EXPECT_EQ(attributes.at("narwhal.request_id"),
            json({{"stringValue", Header(c, "x-request-id")}}));
  for (const char* phase : {"admission", "prefill", "handoff_check", "decode"}) {
    ASSERT_TRUE(by_name.count(phase)) << phase;
    EXPECT_EQ(by_name[phase]["parentSpanId"], (*root)["spanId"]) << phase;
  }
  const std::vector<json> prefills = SimRequests(Sim("p0"), "prefill");
  const std::vector<json> decodes = SimRequests(Sim("d0"), "decode");
  ASSERT_EQ(prefills.size(), 1u);
  ASSERT_EQ(decodes.size(), 1u);
  EXPECT_EQ(by_name["prefill"]["spanId"], LegSpan(prefills[0]));
  EXPECT_EQ(by_name["decode"]["spanId"], LegSpan(decodes[0]));
  EXPECT_EQ(by_name["decode"]["kind"], 3);
  EXPECT_EQ(AttributesOf(by_name["decode"]).at("narwhal.engine.iid"),
            json({{"stringValue", "d0"}}));

  // gRPC metadata.
  const std::string grpc_trace = "0af7651916cd43dd8448eb211c80319c";
  auto stub = narwhal::v1::Inference::NewStub(
      grpc::CreateChannel(router.grpc_target(), grpc::InsecureChannelCredentials()));
  narwhal::v1::GenerateRequest request;
  request.set_model(kModel);
  request.set_prompt("grpc traced");
  request.set_max_tokens(2);
  grpc::ClientContext ctx;
  ctx.AddMetadata("traceparent", "00-" + grpc_trace + "-b7ad6b7169203331-01");
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  narwhal::v1::CompleteResponse response;
  ASSERT_TRUE(stub->Complete(&ctx, request, &response).ok());
  CountRequest(router);
  ASSERT_TRUE(WaitUntil([&] { return receiver.Trace(grpc_trace).size() == 5; }, absl::Seconds(10)));
  bool grpc_root = false;
  for (const json& s : receiver.Trace(grpc_trace)) {
    if (s.value("parentSpanId", "") != "b7ad6b7169203331") continue;
    grpc_root = true;
    EXPECT_EQ(AttributesOf(s).at("rpc.system"), json({{"stringValue", "grpc"}}));
  }
  EXPECT_TRUE(grpc_root);

  // No client trace: the router starts a sampled one and exports it; its
  // request span has no parent.
  HttpCapture fresh = Send(router, kCompletions, Completion("untraced", 2, false));
  ASSERT_EQ(fresh.status, 200) << Describe(fresh);
  const std::string started = Header(fresh, "x-request-id");
  ASSERT_TRUE(WaitUntil([&] { return receiver.Trace(started).size() == 5; }, absl::Seconds(10)));
  int roots = 0;
  for (const json& s : receiver.Trace(started)) roots += s.contains("parentSpanId") ? 0 : 1;
  EXPECT_EQ(roots, 1);
  EXPECT_EQ(SimRequests(Sim("d0"), "decode").back()["headers"].value("traceparent", "").substr(52),
            "-01");

  // A client's unsampled trace is not exported.
  const std::string quiet = "11111111111111111111111111111111";
  HttpCapture unsampled =
      Send(router, kCompletions, Completion("quiet", 2, false),
           WithHeaders({{"traceparent", "00-" + quiet + "-00f067aa0ba902b7-00"}}));
  ASSERT_EQ(unsampled.status, 200);
  EXPECT_GE(ScrapedMetric(router, "narwhal_trace_spans_exported_total"), 15);
  EXPECT_TRUE(receiver.Trace(quiet).empty());
}

}  // namespace
}  // namespace narwhal::testing
