// Span export (server/tracing/otlp_exporter) against an OTLP/HTTP receiver
// on loopback (cpp-httplib) that decodes what it gets: the JSON document's
// shape (ids, parents, kinds, times, typed attributes, status), batching,
// a full queue that drops and counts without waiting for the receiver, a
// failing endpoint, and Stop() sending what is queued.
#include "server/tracing/otlp_exporter.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <prometheus/registry.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

namespace narwhal::server {
namespace {

using json = nlohmann::json;

// An OTLP/HTTP receiver: keeps each POST /v1/traces body, parsed; `gate`
// (when set) holds every answer until it is opened.
class Receiver {
 public:
  Receiver() {
    server_.Post("/v1/traces", [this](const httplib::Request& req, httplib::Response& res) {
      ++arrivals_;
      if (gated_.load()) gate_.wait();
      std::lock_guard<std::mutex> lock(mu_);
      content_types_.push_back(req.get_header_value("Content-Type"));
      documents_.push_back(json::parse(req.body, nullptr, false));
      res.status = status_.load();
      res.set_content("{}", "application/json");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~Receiver() {
    Open();
    server_.stop();
    thread_.join();
  }
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  void Gate() { gated_ = true; }
  void Open() {
    if (gated_.exchange(false)) opened_.set_value();
  }
  void AnswerWith(int status) { status_ = status; }
  // POSTs that reached the handler (a gated one before it answers).
  int arrivals() const { return arrivals_.load(); }
  std::vector<json> documents() {
    std::lock_guard<std::mutex> lock(mu_);
    return documents_;
  }
  std::vector<std::string> content_types() {
    std::lock_guard<std::mutex> lock(mu_);
    return content_types_;
  }
  // Every span received, in order.
  std::vector<json> Spans() {
    std::vector<json> out;
    for (const json& d : documents()) {
      for (const json& s : d["resourceSpans"][0]["scopeSpans"][0]["spans"]) out.push_back(s);
    }
    return out;
  }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::vector<json> documents_;
  std::vector<std::string> content_types_;
  std::atomic<int> status_{200};
  std::atomic<int> arrivals_{0};
  std::atomic<bool> gated_{false};
  std::promise<void> opened_;
  std::shared_future<void> gate_ = opened_.get_future().share();
};

router::TracingSettings Settings(const std::string& endpoint, int max_queued = 8192,
                                 double interval_s = 0.05) {
  router::TracingSettings t;
  t.otlp_endpoint = endpoint;
  t.max_queued_spans = max_queued;
  t.export_interval_s = interval_s;
  t.export_timeout_s = 2;
  return t;
}

// A request with a prefill and a decode leg; `n` makes its ids distinct.
router::RequestSpans Request(int n, bool failed_decode = false) {
  router::RequestSpans r;
  r.trace.trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
  r.trace.parent_id = "00f067aa0ba902b7";
  r.trace.flags = 1;
  r.trace.tracestate = "vendor=1";
  char id[17];
  std::snprintf(id, sizeof(id), "%016x", 0x100 + n);
  r.request.name = "chat Qwen/Qwen3-0.6B";
  r.request.span_id = id;
  r.request.kind = router::SpanKind::kServer;
  r.request.start_unix_s = 1700000000.25;
  r.request.end_unix_s = 1700000001.5;
  r.request.attributes = {{"gen_ai.operation.name", "chat"},
                          {"gen_ai.usage.output_tokens", 7},
                          {"narwhal.sampled_ratio", 0.5},
                          {"narwhal.local_prefill", false},
                          {"gen_ai.response.finish_reasons", json::array({"stop"})}};
  router::PhaseSpan decode;
  decode.name = "decode";
  std::snprintf(id, sizeof(id), "%016x", 0x900 + n);
  decode.span_id = id;
  decode.parent_id = r.request.span_id;
  decode.kind = router::SpanKind::kClient;
  decode.start_unix_s = 1700000000.5;
  decode.end_unix_s = 1700000001.25;
  if (failed_decode) decode.error = "engine went silent between tokens";
  r.phases.push_back(decode);
  return r;
}

bool WaitFor(const std::function<bool()>& done, std::chrono::seconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return done();
}

TEST(OtlpEndpointTest, HostPortAndPath) {
  auto t = ParseOtlpEndpoint("http://collector:4318");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->host, "collector");
  EXPECT_EQ(t->port, "4318");
  EXPECT_EQ(t->path, "/v1/traces");
  t = ParseOtlpEndpoint("http://[::1]:9/otlp/v1/traces");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->host, "::1");
  EXPECT_EQ(t->path, "/otlp/v1/traces");
  EXPECT_FALSE(ParseOtlpEndpoint("https://collector:4318").ok());
  EXPECT_FALSE(ParseOtlpEndpoint("http://collector").ok());
}

TEST(OtlpExporterTest, TheReceiverDecodesEachSpanWithItsTraceParentKindTimesAndAttributes) {
  Receiver receiver;
  prometheus::Registry registry;
  auto exporter = OtlpExporter::Start(Settings(receiver.endpoint()), "1.2.3", &registry);
  ASSERT_TRUE(exporter.ok()) << exporter.status();
  (*exporter)->Export(Request(1, /*failed_decode=*/true));
  ASSERT_TRUE(WaitFor([&] { return receiver.Spans().size() == 2; }, std::chrono::seconds(10)));
  EXPECT_EQ(receiver.content_types()[0], "application/json");
  const json doc = receiver.documents()[0];
  const json& resource = doc["resourceSpans"][0]["resource"]["attributes"];
  EXPECT_EQ(resource[0]["key"], "service.name");
  EXPECT_EQ(resource[0]["value"]["stringValue"], "narwhal");
  EXPECT_EQ(doc["resourceSpans"][0]["scopeSpans"][0]["scope"]["version"], "1.2.3");

  const std::vector<json> spans = receiver.Spans();
  const json& root = spans[0];
  EXPECT_EQ(root["traceId"], "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(root["spanId"], "0000000000000101");
  EXPECT_EQ(root["parentSpanId"], "00f067aa0ba902b7");  // the client's span
  EXPECT_EQ(root["traceState"], "vendor=1");
  EXPECT_EQ(root["kind"], 2);
  EXPECT_EQ(root["name"], "chat Qwen/Qwen3-0.6B");
  EXPECT_EQ(root["startTimeUnixNano"], "1700000000250000000");
  EXPECT_EQ(root["endTimeUnixNano"], "1700000001500000000");
  EXPECT_FALSE(root.contains("status"));
  std::map<std::string, json> attributes;
  for (const json& a : root["attributes"]) attributes[a["key"]] = a["value"];
  EXPECT_EQ(attributes["gen_ai.operation.name"], json({{"stringValue", "chat"}}));
  EXPECT_EQ(attributes["gen_ai.usage.output_tokens"], json({{"intValue", "7"}}));
  EXPECT_EQ(attributes["narwhal.sampled_ratio"], json({{"doubleValue", 0.5}}));
  EXPECT_EQ(attributes["narwhal.local_prefill"], json({{"boolValue", false}}));
  EXPECT_EQ(attributes["gen_ai.response.finish_reasons"]["arrayValue"]["values"][0],
            json({{"stringValue", "stop"}}));

  const json& decode = spans[1];
  EXPECT_EQ(decode["parentSpanId"], "0000000000000101");
  EXPECT_EQ(decode["kind"], 3);
  EXPECT_EQ(decode["status"]["code"], 2);
  EXPECT_EQ(decode["status"]["message"], "engine went silent between tokens");
  (*exporter)->Stop();
  EXPECT_EQ((*exporter)->exported(), 2);
}

TEST(OtlpExporterTest, SpansGoInBatchesOfAtMost512) {
  Receiver receiver;
  auto exporter = OtlpExporter::Start(Settings(receiver.endpoint(), 8192, 30), "v", nullptr);
  ASSERT_TRUE(exporter.ok());
  // 300 requests of 2 spans: a full batch leaves at once (the interval is
  // 30 s); Stop() sends the rest.
  for (int i = 0; i < 300; ++i) (*exporter)->Export(Request(i));
  ASSERT_TRUE(WaitFor([&] { return !receiver.documents().empty(); }, std::chrono::seconds(10)));
  (*exporter)->Stop();
  const std::vector<json> documents = receiver.documents();
  ASSERT_GE(documents.size(), 2u);
  size_t total = 0;
  for (const json& d : documents) {
    const size_t n = d["resourceSpans"][0]["scopeSpans"][0]["spans"].size();
    EXPECT_LE(n, OtlpExporter::kBatchSpans);
    total += n;
  }
  EXPECT_EQ(total, 600u);
  EXPECT_EQ((*exporter)->exported(), 600);
}

TEST(OtlpExporterTest, AFullQueueDropsWholeRequestsAndCountsWithoutWaitingForTheReceiver) {
  Receiver receiver;
  receiver.Gate();  // every answer is held
  prometheus::Registry registry;
  auto exporter = OtlpExporter::Start(Settings(receiver.endpoint(), 16, 0.01), "v", &registry);
  ASSERT_TRUE(exporter.ok());
  // The first request goes out and its POST hangs at the receiver.
  (*exporter)->Export(Request(0));
  ASSERT_TRUE(WaitFor([&] { return receiver.arrivals() == 1; }, std::chrono::seconds(10)));
  // 8 fit in the queue of 16 spans, 12 are dropped, and Export returns while
  // the receiver still holds the first batch.
  for (int i = 1; i <= 20; ++i) (*exporter)->Export(Request(i));
  EXPECT_EQ((*exporter)->dropped_queue_full(), 24);
  EXPECT_TRUE(receiver.documents().empty());
  receiver.Open();
  (*exporter)->Stop();
  EXPECT_EQ((*exporter)->exported(), 18);
  EXPECT_EQ(receiver.Spans().size(), 18u);
}

TEST(OtlpExporterTest, AFailedExportIsDroppedAndCountedAndExportGoesOn) {
  Receiver receiver;
  receiver.AnswerWith(503);
  prometheus::Registry registry;
  auto exporter = OtlpExporter::Start(Settings(receiver.endpoint()), "v", &registry);
  ASSERT_TRUE(exporter.ok());
  (*exporter)->Export(Request(1));
  ASSERT_TRUE(
      WaitFor([&] { return (*exporter)->dropped_export_failed() == 2; }, std::chrono::seconds(10)));
  receiver.AnswerWith(200);
  (*exporter)->Export(Request(2));
  ASSERT_TRUE(WaitFor([&] { return (*exporter)->exported() == 2; }, std::chrono::seconds(10)));

  // Nothing listening: a connect failure, counted the same way.
  auto closed = OtlpExporter::Start(Settings("http://127.0.0.1:1"), "v", nullptr);
  ASSERT_TRUE(closed.ok());
  (*closed)->Export(Request(3));
  (*closed)->Stop();
  EXPECT_EQ((*closed)->dropped_export_failed(), 2);
  EXPECT_EQ((*closed)->exported(), 0);
}

TEST(OtlpExporterTest, AReceiverThatNeverAnswersCostsOneTimeoutPerBatch) {
  Receiver receiver;
  receiver.Gate();  // holds every answer until the end of the test
  router::TracingSettings settings = Settings(receiver.endpoint());
  settings.export_timeout_s = 0.3;
  auto exporter = OtlpExporter::Start(settings, "v", nullptr);
  ASSERT_TRUE(exporter.ok());
  (*exporter)->Export(Request(1));
  ASSERT_TRUE(
      WaitFor([&] { return (*exporter)->dropped_export_failed() == 2; }, std::chrono::seconds(10)));
  EXPECT_EQ(receiver.arrivals(), 1);
  // The exporter goes on with the next batch.
  (*exporter)->Export(Request(2));
  ASSERT_TRUE(
      WaitFor([&] { return (*exporter)->dropped_export_failed() == 4; }, std::chrono::seconds(10)));
  receiver.Open();
  (*exporter)->Stop();
  EXPECT_EQ((*exporter)->exported(), 0);
}

}  // namespace
}  // namespace narwhal::server
