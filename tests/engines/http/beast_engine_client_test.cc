// BeastEngineClient (the event-loop adapter) against real narwhal-sim
// engines, through the blocking facade: each test injects a
// fault into a simulated engine (POST /sim/faults, SPEC §10), runs a leg and
// checks both the one EngineFailure it produced (B10-B13, B19) and what the
// engine actually received (GET /sim/requests, GET /sim/kv).
//
// Budgets are short (first token 0.5 s, read timeout 0.5 s) so the suite is
// fast; every wait is bounded and every timing bound is generous.
#include "engines/http/beast_engine_client.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "engines/api.h"
#include "engines/cancel_token.h"
#include "engines/engine_client.h"
#include "engines/engine_failure.h"
#include "engines/http/connection_pool.h"
#include "engines/http/io_loops.h"
#include "engines/prefill_result.h"
#include "engines/run_blocking.h"
#include "engines/stream_event.h"
#include "tests/fakes/blocking_legs.h"
#include "tests/fakes/edge_status.h"
#include "tests/fakes/fake_clock.h"
#include "tests/fakes/sim_process.h"

namespace narwhal::engines {
namespace {

namespace nt = ::narwhal::testing;

using json = nlohmann::json;
using ::narwhal::testing::SimProcess;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using namespace std::chrono_literals;

constexpr double kFirstTokenS = 0.5;
constexpr double kReadS = 0.5;
constexpr int kMaxTokens = 4;

double WallSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

double SecondsSince(MonoTime t) { return Seconds(MonoClock::now() - t); }

// A loopback port with nothing listening on it.
int UnusedPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    return 0;
  }
  const int port = ntohs(addr.sin_port);
  ::close(fd);
  return port;
}

// Records every decode event; an optional hook may slow or stop the leg.
class Recorder : public DecodeObserver {
 public:
  std::function<bool(const StreamEvent&)> hook;

  bool OnEvent(std::string_view data, const StreamEvent& event) override {
    events.emplace_back(data);
    kinds.push_back(event.kind);
    tokens += event.tokens;
    text += event.text;
    if (event.completion_tokens >= 0) usage_completion_tokens = event.completion_tokens;
    return hook ? hook(event) : true;
  }

  // A client that takes `flush_delay` to accept the first flush after a
  // token: back-pressure, as a slow client's socket applies it.
  Awaitable<bool> Flush() override {
    ++flushes;
    if (flush_probe) flush_probe();
    if (tokens > 0 && flush_delay > std::chrono::milliseconds(0) && !delayed) {
      delayed = true;
      boost::asio::steady_timer t(co_await boost::asio::this_coro::executor, flush_delay);
      co_await t.async_wait(boost::asio::use_awaitable);
    }
    co_return true;
  }

  int Count(EventKind kind) const {
    int n = 0;
    for (EventKind k : kinds) n += k == kind;
    return n;
  }

  std::chrono::milliseconds flush_delay{0};
  std::function<void()> flush_probe;
  bool delayed = false;
  int flushes = 0;
  std::vector<std::string> events;
  std::vector<EventKind> kinds;
  int tokens = 0;
  std::string text;
  long long usage_completion_tokens = -1;
};

json ChatBody() {
  return json::parse(R"({
    "model": "Qwen/Qwen3-0.6B",
    "messages": [{"role": "user", "content": "What is the capital of France?"}],
    "stream": true,
    "stream_options": {"include_usage": true},
    "max_tokens": 4,
    "max_completion_tokens": 4,
    "min_tokens": 2,
    "temperature": 0.7,
    "top_p": 0.95,
    "seed": 11,
    "stop": ["\n\n"],
    "logprobs": false,
    "cache_salt": "salt-1",
    "kv_transfer_params": {"remote_host": "203.0.113.66", "remote_port": 1, "do_remote_prefill": true}
  })");
}

json CompletionBody(bool stream = true) {
  json body = json::parse(R"({"model": "Qwen/Qwen3-0.6B", "prompt": "The capital of France is",
                              "max_tokens": 4, "temperature": 0, "seed": 3})");
  body["stream"] = stream;
  return body;
}

// The event-loop adapter on its own loop, called through the blocking facade
// so each test reads as a sequence of legs.
class Adapter {
 public:
  explicit Adapter(HttpEngineClientOptions options, const Clock* clock = nullptr)
      : clock_(clock != nullptr ? *clock : real_clock_),
        async_(std::move(options), clock_),
        sync_(async_, loops_.executor(0)) {}

  PrefillOutcome Prefill(const EngineTarget& producer, Api api, const json& body,
                         const LegOptions& options) {
    return sync_.Prefill(producer, api, body, options);
  }
  DecodeOutcome Decode(const EngineTarget& consumer, const PrefillResult& handoff, const json& body,
                       bool client_streams, const LegOptions& options, DecodeObserver& observer) {
    return sync_.Decode(consumer, handoff, body, client_streams, options, observer);
  }
  ControlResponse Control(const EngineTarget& engine, std::string_view method,
                          std::string_view path, const std::string& body, double timeout_s) {
    return sync_.Control(engine, method, path, body, timeout_s);
  }
  const HttpEngineClientOptions& options() const { return *async_.options(); }

  // Idle pooled connections to `url`'s engine on the adapter's loop.
  size_t IdleConnections(const std::string& url) {
    std::string host;
    int port = 0;
    ParseEngineUrl(url, &host, &port);
    const std::string key = host + ":" + std::to_string(port);
    return RunBlocking(loops_.executor(0), [&]() -> Awaitable<size_t> {
      co_return ConnectionPool::Of(co_await boost::asio::this_coro::executor).idle(key);
    }());
  }

 private:
  RealClock real_clock_;
  const Clock& clock_;
  IoLoops loops_{1};
  BeastEngineClient async_;
  ::narwhal::testing::BlockingLegs sync_;
};

HttpEngineClientOptions FastOptions() {
  HttpEngineClientOptions o;
  o.first_token_timeout_s = kFirstTokenS;
  o.decode_read_timeout_s = kReadS;
  o.connect_timeout_s = 2;
  return o;
}

LegOptions Leg(const std::string& rid, CancelToken* cancel = nullptr) {
  LegOptions o;
  o.backend_request_id = rid;
  o.request_deadline = MonoClock::now() + 60s;
  o.cancel = cancel;
  return o;
}

// Only the inference requests an engine received (not control traffic).
std::vector<json> InferenceRecords(SimProcess& sim) {
  std::vector<json> out;
  absl::StatusOr<json> all = sim.Requests();
  EXPECT_TRUE(all.ok()) << all.status();
  if (!all.ok()) return out;
  const json& list = all->is_object() && all->contains("requests") ? (*all)["requests"] : *all;
  for (const json& r : list) {
    if (r.value("path", "").rfind("/v1/", 0) == 0) out.push_back(r);
  }
  return out;
}

// Polls the engine's request log until `pred` holds for the last inference
// record (at most `timeout`); returns that record, or null.
json WaitForLastRecord(SimProcess& sim, const std::function<bool(const json&)>& pred,
                       std::chrono::milliseconds timeout = 5000ms) {
  const MonoTime until = MonoClock::now() + timeout;
  while (true) {
    std::vector<json> records = InferenceRecords(sim);
    if (!records.empty() && pred(records.back())) return records.back();
    if (MonoClock::now() >= until) return nullptr;
    std::this_thread::sleep_for(20ms);
  }
}

bool Ended(const json& record) { return record.contains("end") && !record["end"].is_null(); }

void SetFaults(SimProcess& sim, const std::string& rules) {
  const absl::Status s = sim.SetFaults(json::parse(rules));
  ASSERT_TRUE(s.ok()) << s;
}

class BeastEngineClientTest : public ::testing::Test {
 protected:
  static std::unique_ptr<SimProcess> StartSim(std::vector<std::string> args) {
    args.insert(args.end(), {"--threads", "16"});
    absl::StatusOr<std::unique_ptr<SimProcess>> sim = SimProcess::Start(std::move(args));
    EXPECT_TRUE(sim.ok()) << sim.status();
    return sim.ok() ? std::move(*sim) : nullptr;
  }

  void SetUp() override {
    producer_ = StartSim({"--engine-id", "p0", "--role", "prefill"});
    consumer_ = StartSim({"--engine-id", "d0", "--role", "decode"});
    ASSERT_NE(producer_, nullptr);
    ASSERT_NE(consumer_, nullptr);
    p0_ = EngineTarget{"p0", producer_->url()};
    d0_ = EngineTarget{"d0", consumer_->url()};
  }

  // A real handoff from p0.
  PrefillResult Handoff(Adapter& client, Api api = Api::kChatCompletions) {
    const json body = api == Api::kChatCompletions ? ChatBody() : CompletionBody();
    PrefillOutcome out = client.Prefill(p0_, api, body, Leg("rid-prefill"));
    EXPECT_TRUE(out.ok()) << (out.failure ? out.failure->detail : "");
    if (!out.ok()) {
      return PrefillResult("p0", p0_.url, api, "rid-prefill", "NixlConnector", json::object());
    }
    return *out.result;
  }

  // Runs a decode of a fresh handoff from p0 on d0 with the consumer faults
  // `rules`, and returns the failure (checking the leg did fail).
  EngineFailure DecodeFailure(Adapter& client, const std::string& rules, Recorder& rec,
                              Api api = Api::kChatCompletions, LegOptions leg = Leg("rid-decode")) {
    const PrefillResult handoff = Handoff(client, api);
    if (!rules.empty()) SetFaults(*consumer_, rules);
    const json body = api == Api::kChatCompletions ? ChatBody() : CompletionBody();
    DecodeOutcome out = client.Decode(d0_, handoff, body, /*client_streams=*/true, leg, rec);
    EXPECT_FALSE(out.ok()) << "the decode leg was expected to fail";
    return out.failure.value_or(EngineFailure{});
  }

  std::unique_ptr<SimProcess> producer_;
  std::unique_ptr<SimProcess> consumer_;
  EngineTarget p0_;
  EngineTarget d0_;
};

// --- B1, B2: the prefill leg ----------------------------------------------------

TEST_F(BeastEngineClientTest, BothLegsSendTheirTraceContextHeaders) {
  Adapter client(FastOptions());
  LegOptions prefill = Leg("rid-p-t");
  prefill.traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  prefill.tracestate = "congo=t61rcWkgMzE";
  PrefillOutcome out = client.Prefill(p0_, Api::kCompletions, CompletionBody(), prefill);
  ASSERT_TRUE(out.ok()) << out.failure->detail;
  LegOptions decode = Leg("rid-d-t");
  decode.traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-b7ad6b7169203331-01";
  Recorder rec;
  ASSERT_TRUE(client.Decode(d0_, *out.result, CompletionBody(), true, decode, rec).ok());

  const std::vector<json> p = InferenceRecords(*producer_);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0]["headers"]["traceparent"], prefill.traceparent);
  EXPECT_EQ(p[0]["headers"]["tracestate"], "congo=t61rcWkgMzE");
  const std::vector<json> d = InferenceRecords(*consumer_);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0]["headers"]["traceparent"], decode.traceparent);
  EXPECT_FALSE(d[0]["headers"].contains("tracestate"));  // none given for this leg
}

TEST_F(BeastEngineClientTest, B1_PrefillBodyAndHeaders) {
  Adapter client(FastOptions());
  PrefillOutcome out = client.Prefill(p0_, Api::kChatCompletions, ChatBody(), Leg("rid-p-1"));
  ASSERT_TRUE(out.ok()) << out.failure->detail;

  const std::vector<json> records = InferenceRecords(*producer_);
  ASSERT_EQ(records.size(), 1u);
  const json& r = records[0];
  EXPECT_EQ(r["method"], "POST");
  EXPECT_EQ(r["path"], "/v1/chat/completions");
  EXPECT_EQ(r["phase"], "prefill");
  EXPECT_EQ(r["headers"]["x-request-id"], "rid-p-1");
  EXPECT_THAT(r["headers"].value("content-type", ""), StartsWith("application/json"));
  EXPECT_FALSE(r["headers"].contains("authorization"));
  EXPECT_FALSE(r["headers"].contains("traceparent"));  // none given
  EXPECT_FALSE(r["headers"].contains("tracestate"));
  EXPECT_EQ(r["status"], 200);

  json expected = ChatBody();
  expected["stream"] = false;
  expected.erase("stream_options");
  expected.erase("min_tokens");
  expected.erase("min_completion_tokens");
  expected["max_tokens"] = 1;
  expected["max_completion_tokens"] = 1;
  expected["kv_transfer_params"] =
      json::parse(R"({"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,)"
                  R"("remote_block_ids":null,"remote_host":null,"remote_port":null})");
  EXPECT_EQ(r["body"], expected);
}

TEST_F(BeastEngineClientTest, B2_PrefillResultBindsProducer) {
  Adapter client(FastOptions());
  PrefillOutcome out = client.Prefill(p0_, Api::kCompletions, CompletionBody(), Leg("rid-p-2"));
  ASSERT_TRUE(out.ok()) << out.failure->detail;
  const PrefillResult& result = *out.result;
  EXPECT_EQ(result.producer_iid(), "p0");
  EXPECT_EQ(result.producer_url(), producer_->url());
  EXPECT_EQ(result.endpoint(), Api::kCompletions);
  EXPECT_EQ(result.backend_request_id(), "rid-p-2");
  EXPECT_EQ(result.connector(), "NixlConnector");

  const json d = result.parameters();
  EXPECT_EQ(d["remote_engine_id"], "p0");
  EXPECT_EQ(d["remote_port"], producer_->port());
  EXPECT_EQ(d["do_remote_prefill"], true);
  ASSERT_TRUE(d["remote_block_ids"].is_array());
  EXPECT_FALSE(d["remote_block_ids"].empty());

  // The descriptor names the blocks the producer now holds for it.
  absl::StatusOr<json> kv = producer_->Kv();
  ASSERT_TRUE(kv.ok()) << kv.status();
  ASSERT_EQ((*kv)["held"].size(), 1u);
  EXPECT_EQ((*kv)["held"][0]["remote_request_id"], d["remote_request_id"]);
  EXPECT_EQ((*kv)["held"][0]["remote_block_ids"], d["remote_block_ids"]);
}

TEST_F(BeastEngineClientTest, B2_NoDescriptorIsPrefillFailure) {
  SetFaults(*producer_, R"({"faults":[{"kind":"no_descriptor"}]})");
  Adapter client(FastOptions());
  PrefillOutcome out = client.Prefill(p0_, Api::kCompletions, CompletionBody(), Leg("rid-p-3"));
  ASSERT_FALSE(out.ok());
  const EngineFailure& f = *out.failure;
  EXPECT_EQ(f.phase, Phase::kPrefill);
  EXPECT_EQ(nt::HttpStatus(f), 502);
  EXPECT_EQ(f.reason, FailureReason::kInvalidResponse);
  EXPECT_EQ(f.breaker_class, BreakerClass::kKvHandoff);
  EXPECT_EQ(f.evidence_iid, "p0");
  EXPECT_EQ(f.iid, "p0");
  EXPECT_THAT(f.detail, StartsWith("no handoff: "));
  EXPECT_FALSE(f.transient);
}

// --- B3: validation before any decode request -----------------------------------

TEST_F(BeastEngineClientTest, B3_DescriptorWithoutEngineIdRejectedBeforeDecode) {
  SetFaults(*producer_, R"({"faults":[{"kind":"descriptor_without_engine_id"}]})");
  Adapter client(FastOptions());
  const PrefillResult handoff = Handoff(client);
  ASSERT_FALSE(handoff.descriptor().contains("remote_engine_id"));

  Recorder rec;
  DecodeOutcome out = client.Decode(d0_, handoff, ChatBody(), true, Leg("rid-d-3"), rec);
  ASSERT_FALSE(out.ok());
  const EngineFailure& f = *out.failure;
  EXPECT_EQ(f.phase, Phase::kDecode);
  EXPECT_EQ(nt::HttpStatus(f), 502);
  EXPECT_EQ(f.reason, FailureReason::kInvalidResponse);
  EXPECT_EQ(f.breaker_class, BreakerClass::kKvHandoff);
  EXPECT_EQ(f.evidence_iid, "p0") << "evidence counts against the producer";
  EXPECT_EQ(f.iid, "d0");
  EXPECT_THAT(f.detail, StartsWith("invalid continuation: "));
  EXPECT_THAT(f.detail, HasSubstr("remote_engine_id"));
  EXPECT_TRUE(InferenceRecords(*consumer_).empty()) << "the decode engine must receive nothing";
  EXPECT_TRUE(rec.events.empty());
}

TEST_F(BeastEngineClientTest, B3_MalformedBlockIdsRejectedBeforeDecode) {
  for (const char* rule : {R"({"faults":[{"kind":"malformed_block_ids"}]})",
                           R"({"faults":[{"kind":"malformed_block_ids","block_ids":[3,-1]}]})",
                           R"({"faults":[{"kind":"malformed_block_ids","block_ids":[[true]]}]})",
                           R"({"faults":[{"kind":"malformed_block_ids","block_ids":[[1],2]}]})"}) {
    SCOPED_TRACE(rule);
    SetFaults(*producer_, rule);
    Adapter client(FastOptions());
    const PrefillResult handoff = Handoff(client);
    Recorder rec;
    DecodeOutcome out = client.Decode(d0_, handoff, ChatBody(), true, Leg("rid-d-4"), rec);
    ASSERT_FALSE(out.ok());
    EXPECT_EQ(out.failure->phase, Phase::kDecode);
    EXPECT_EQ(nt::HttpStatus(*out.failure), 502);
    EXPECT_EQ(out.failure->breaker_class, BreakerClass::kKvHandoff);
    EXPECT_EQ(out.failure->evidence_iid, "p0");
    EXPECT_THAT(out.failure->detail, StartsWith("invalid continuation: "));
    EXPECT_THAT(out.failure->detail, HasSubstr("remote_block_ids"));
    EXPECT_TRUE(InferenceRecords(*consumer_).empty());
  }
}

TEST_F(BeastEngineClientTest, B3_ConnectorMismatch) {
  Adapter producer_side(FastOptions());
  HttpEngineClientOptions other = FastOptions();
  other.connector = "LMCacheConnectorV1";
  Adapter consumer_side(other);
  const PrefillResult handoff = Handoff(producer_side);
  ASSERT_EQ(handoff.connector(), "NixlConnector");

  Recorder rec;
  DecodeOutcome out = consumer_side.Decode(d0_, handoff, ChatBody(), true, Leg("rid-d-5"), rec);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(nt::HttpStatus(*out.failure), 502);
  EXPECT_EQ(out.failure->breaker_class, BreakerClass::kKvHandoff);
  EXPECT_EQ(out.failure->evidence_iid, "p0");
  EXPECT_THAT(out.failure->detail, StartsWith("invalid continuation: "));
  EXPECT_THAT(out.failure->detail, HasSubstr("connector"));
  EXPECT_TRUE(InferenceRecords(*consumer_).empty());
}

// --- The pinned descriptor contract and single use ------------------------------

TEST_F(BeastEngineClientTest, HandoffFeedsOneDecodeOnly) {
  Adapter client(FastOptions());
  const PrefillResult handoff = Handoff(client);
  Recorder first;
  DecodeOutcome out = client.Decode(d0_, handoff, ChatBody(), true, Leg("rid-d-once"), first);
  ASSERT_TRUE(out.ok()) << out.failure->detail;
  ASSERT_EQ(InferenceRecords(*consumer_).size(), 1u);

  // The same result (or a copy of it) again: refused before any request.
  const PrefillResult copy = handoff;  // NOLINT(performance-unnecessary-copy-initialization)
  Recorder again;
  out = client.Decode(d0_, copy, ChatBody(), true, Leg("rid-d-twice"), again);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.failure->handoff_rejection, "reused_handoff");
  EXPECT_EQ(nt::HttpStatus(*out.failure), 502);
  EXPECT_EQ(out.failure->phase, Phase::kDecode);
  EXPECT_EQ(out.failure->breaker_class, BreakerClass::kNone) << "no engine is at fault";
  EXPECT_THAT(out.failure->detail, StartsWith("invalid continuation: "));
  EXPECT_EQ(InferenceRecords(*consumer_).size(), 1u) << "the consumer must receive nothing";
  EXPECT_TRUE(again.events.empty());
}

TEST_F(BeastEngineClientTest, DescriptorMustNameTheConfiguredProducer) {
  Adapter client(FastOptions());
  // p0's sim calls itself "p0"; a fleet that says otherwise is refused.
  EngineTarget misnamed = p0_;
  misnamed.kv_engine_id = "p1";
  PrefillOutcome prefill =
      client.Prefill(misnamed, Api::kChatCompletions, ChatBody(), Leg("rid-p-named"));
  ASSERT_TRUE(prefill.ok()) << prefill.failure->detail;
  Recorder rec;
  DecodeOutcome out =
      client.Decode(d0_, *prefill.result, ChatBody(), true, Leg("rid-d-named"), rec);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.failure->handoff_rejection, "engine_id_mismatch");
  EXPECT_EQ(out.failure->evidence_iid, "p0");
  EXPECT_THAT(out.failure->detail, HasSubstr("\"p1\""));
  EXPECT_TRUE(InferenceRecords(*consumer_).empty());

  EngineTarget named = p0_;
  named.kv_engine_id = "p0";
  prefill = client.Prefill(named, Api::kChatCompletions, ChatBody(), Leg("rid-p-named-2"));
  ASSERT_TRUE(prefill.ok()) << prefill.failure->detail;
  out = client.Decode(d0_, *prefill.result, ChatBody(), true, Leg("rid-d-named-2"), rec);
  EXPECT_TRUE(out.ok()) << out.failure->detail;
}

TEST_F(BeastEngineClientTest, RemoteHostRewriteUsesTheProducersConfiguredHost) {
  HttpEngineClientOptions options = FastOptions();
  options.remote_host_policy = RemoteHostPolicy::kRewrite;
  Adapter client(options);
  // The sim advertises 127.0.0.1; the fleet knows the producer as localhost.
  std::string host;
  int port = 0;
  ASSERT_TRUE(ParseEngineUrl(p0_.url, &host, &port));
  ASSERT_EQ(host, "127.0.0.1");
  EngineTarget by_name{"p0", "http://localhost:" + std::to_string(port)};
  PrefillOutcome prefill =
      client.Prefill(by_name, Api::kChatCompletions, ChatBody(), Leg("rid-p-rewrite"));
  ASSERT_TRUE(prefill.ok()) << prefill.failure->detail;
  EXPECT_EQ(prefill.result->parameters()["remote_host"], "localhost");
  // The consumer pulls from the rewritten host and the decode completes.
  Recorder rec;
  DecodeOutcome out =
      client.Decode(d0_, *prefill.result, ChatBody(), true, Leg("rid-d-rewrite"), rec);
  EXPECT_TRUE(out.ok()) << out.failure->detail;
  const std::vector<json> records = InferenceRecords(*consumer_);
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0]["body"]["kv_transfer_params"]["remote_host"], "localhost");
}

// --- B4, B5, B6: the decode leg -------------------------------------------------

TEST_F(BeastEngineClientTest, B4_DecodeGetsDescriptorVerbatimAndStreams) {
  Adapter client(FastOptions());
  const PrefillResult handoff = Handoff(client);
  Recorder rec;
  DecodeOutcome out =
      client.Decode(d0_, handoff, ChatBody(), /*client_streams=*/true, Leg("rid-d-6"), rec);
  ASSERT_TRUE(out.ok()) << out.failure->detail;

  EXPECT_EQ(rec.tokens, kMaxTokens);
  EXPECT_FALSE(rec.text.empty());
  ASSERT_FALSE(rec.kinds.empty());
  EXPECT_EQ(rec.kinds.front(), EventKind::kMetadata) << "chat streams open with the role chunk";
  EXPECT_EQ(rec.Count(EventKind::kError), 0);

  const std::vector<json> records = InferenceRecords(*consumer_);
  ASSERT_EQ(records.size(), 1u);
  const json& r = records[0];
  EXPECT_EQ(r["path"], "/v1/chat/completions");
  EXPECT_EQ(r["phase"], "decode");
  EXPECT_EQ(r["headers"]["x-request-id"], "rid-d-6");
  EXPECT_EQ(r["tokens_sent"], kMaxTokens);
  json expected = ChatBody();
  expected["stream"] = true;
  expected["kv_transfer_params"] = handoff.parameters();
  EXPECT_EQ(r["body"], expected) << "original body, stream:true, the descriptor verbatim";
}

TEST_F(BeastEngineClientTest, B4_NonStreamingClientGetsUsageUpstream) {
  Adapter client(FastOptions());
  const PrefillResult handoff = Handoff(client, Api::kCompletions);
  Recorder rec;
  DecodeOutcome out = client.Decode(d0_, handoff, CompletionBody(/*stream=*/false),
                                    /*client_streams=*/false, Leg("rid-d-7"), rec);
  ASSERT_TRUE(out.ok()) << out.failure->detail;
  EXPECT_EQ(rec.tokens, kMaxTokens);
  EXPECT_EQ(rec.usage_completion_tokens, kMaxTokens);

  const std::vector<json> records = InferenceRecords(*consumer_);
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0]["path"], "/v1/completions");
  EXPECT_EQ(records[0]["body"]["stream"], true);
  EXPECT_EQ(records[0]["body"]["stream_options"], json({{"include_usage", true}}));
  EXPECT_EQ(records[0]["body"]["kv_transfer_params"], handoff.parameters());
}

TEST_F(BeastEngineClientTest, B4_ConsumerPullsHandoffFromProducer) {
  Adapter client(FastOptions());
  const PrefillResult handoff = Handoff(client);
  Recorder rec;
  ASSERT_TRUE(client.Decode(d0_, handoff, ChatBody(), true, Leg("rid-d-8"), rec).ok());

  absl::StatusOr<json> kv = producer_->Kv();
  ASSERT_TRUE(kv.ok()) << kv.status();
  EXPECT_TRUE((*kv)["held"].empty());
  ASSERT_EQ((*kv)["consumed"].size(), 1u);
  const json& entry = (*kv)["consumed"][0];
  EXPECT_EQ(entry["remote_request_id"], handoff.descriptor()["remote_request_id"]);
  EXPECT_EQ(entry["consumer"]["engine_id"], "d0");
}

TEST_F(BeastEngineClientTest, B5_SameWorkerDecodeStripsTransferParams) {
  Adapter client(FastOptions());
  const PrefillResult handoff = Handoff(client);
  ASSERT_TRUE(ChatBody().contains("kv_transfer_params")) << "the client sent its own";
  Recorder rec;
  DecodeOutcome out = client.Decode(p0_, handoff, ChatBody(), true, Leg("rid-d-9"), rec);
  ASSERT_TRUE(out.ok()) << out.failure->detail;
  EXPECT_EQ(rec.tokens, kMaxTokens);

  const std::vector<json> records = InferenceRecords(*producer_);
  ASSERT_EQ(records.size(), 2u);  // the prefill, then the same-worker decode
  const json& r = records[1];
  EXPECT_EQ(r["phase"], "decode");
  EXPECT_EQ(r["headers"]["x-request-id"], "rid-d-9");
  EXPECT_FALSE(r["body"].contains("kv_transfer_params"));
  json expected = ChatBody();
  expected.erase("kv_transfer_params");
  expected["stream"] = true;
  EXPECT_EQ(r["body"], expected);
  EXPECT_TRUE(InferenceRecords(*consumer_).empty());
}

TEST_F(BeastEngineClientTest, B6_PrefillResultPassedUnchanged) {
  Adapter client(FastOptions());
  const PrefillResult handoff = Handoff(client);
  const json original = handoff.parameters();
  json copy = handoff.parameters();
  copy["remote_host"] = "203.0.113.9";
  copy["remote_block_ids"] = json::array();
  copy["remote_engine_id"] = "someone-else";

  Recorder rec;
  DecodeOutcome out = client.Decode(d0_, handoff, ChatBody(), true, Leg("rid-d-10"), rec);
  ASSERT_TRUE(out.ok()) << out.failure->detail;
  const std::vector<json> records = InferenceRecords(*consumer_);
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0]["body"]["kv_transfer_params"], original);
  absl::StatusOr<json> kv = producer_->Kv();
  ASSERT_TRUE(kv.ok());
  EXPECT_EQ((*kv)["consumed"].size(), 1u) << "the pull reached the real producer";
}

// --- B10: failure mapping -------------------------------------------------------

TEST_F(BeastEngineClientTest, B10_EngineStatus503Is502) {
  Adapter client(FastOptions());
  SetFaults(*producer_,
            R"({"faults":[{"kind":"http_status","status":503,"message":"queue is full"}]})");
  PrefillOutcome prefill = client.Prefill(p0_, Api::kCompletions, CompletionBody(), Leg("r1"));
  ASSERT_FALSE(prefill.ok());
  EXPECT_EQ(prefill.failure->phase, Phase::kPrefill);
  EXPECT_EQ(nt::HttpStatus(*prefill.failure), 502);
  EXPECT_EQ(prefill.failure->engine_status, 503);
  EXPECT_EQ(prefill.failure->reason, FailureReason::kEngineError);
  EXPECT_EQ(prefill.failure->breaker_class, BreakerClass::kInferenceStatus);
  EXPECT_EQ(prefill.failure->evidence_iid, "p0");
  EXPECT_TRUE(prefill.failure->transient);
  EXPECT_EQ(prefill.failure->detail, "engine returned HTTP 503: queue is full");

  Recorder rec;
  const EngineFailure f = DecodeFailure(
      client, R"({"faults":[{"kind":"http_status","status":503,"message":"queue is full"}]})", rec);
  EXPECT_EQ(f.phase, Phase::kDecode);
  EXPECT_EQ(nt::HttpStatus(f), 502);
  EXPECT_EQ(f.engine_status, 503);
  EXPECT_EQ(f.breaker_class, BreakerClass::kInferenceStatus);
  EXPECT_EQ(f.evidence_iid, "d0");
  EXPECT_TRUE(f.transient);
  EXPECT_EQ(f.detail, "engine returned HTTP 503: queue is full");
}

TEST_F(BeastEngineClientTest, B10_Engine408Is504) {
  Adapter client(FastOptions());
  SetFaults(*producer_, R"({"faults":[{"kind":"http_status","status":408}]})");
  PrefillOutcome prefill = client.Prefill(p0_, Api::kCompletions, CompletionBody(), Leg("r1"));
  ASSERT_FALSE(prefill.ok());
  EXPECT_EQ(nt::HttpStatus(*prefill.failure), 504);
  EXPECT_EQ(prefill.failure->engine_status, 408);
  EXPECT_EQ(prefill.failure->reason, FailureReason::kEngineOverloaded);
  EXPECT_EQ(prefill.failure->breaker_class, BreakerClass::kOverload);
  EXPECT_TRUE(prefill.failure->transient);
  EXPECT_THAT(prefill.failure->detail, StartsWith("engine returned HTTP 408: "));

  Recorder rec;
  const EngineFailure f =
      DecodeFailure(client, R"({"faults":[{"kind":"http_status","status":408}]})", rec);
  EXPECT_EQ(f.phase, Phase::kDecode);
  EXPECT_EQ(nt::HttpStatus(f), 504);
  EXPECT_EQ(f.breaker_class, BreakerClass::kOverload);
}

TEST_F(BeastEngineClientTest, B10_Engine4xxKeepsItsStatusAndMessage) {
  Adapter client(FastOptions());
  SetFaults(*producer_, R"({"faults":[{"kind":"http_status","status":400,)"
                        R"("message":"This model's maximum context length is 32768 tokens"}]})");
  PrefillOutcome prefill = client.Prefill(p0_, Api::kCompletions, CompletionBody(), Leg("r1"));
  ASSERT_FALSE(prefill.ok());
  EXPECT_EQ(nt::HttpStatus(*prefill.failure), 400);
  EXPECT_EQ(prefill.failure->reason, FailureReason::kEngineRejected);
  EXPECT_EQ(prefill.failure->breaker_class, BreakerClass::kNone);
  EXPECT_EQ(prefill.failure->evidence_iid, "");
  EXPECT_FALSE(prefill.failure->transient);
  EXPECT_EQ(prefill.failure->detail, "This model's maximum context length is 32768 tokens");
}

TEST_F(BeastEngineClientTest, B10_ConnectionRefused) {
  const int port = UnusedPort();
  ASSERT_GT(port, 0);
  const EngineTarget dead{"x9", "http://127.0.0.1:" + std::to_string(port)};
  Adapter client(FastOptions());

  PrefillOutcome prefill = client.Prefill(dead, Api::kCompletions, CompletionBody(), Leg("r1"));
  ASSERT_FALSE(prefill.ok());
  EXPECT_EQ(prefill.failure->phase, Phase::kPrefill);
  EXPECT_EQ(nt::HttpStatus(*prefill.failure), 502);
  EXPECT_EQ(prefill.failure->reason, FailureReason::kEngineUnreachable);
  EXPECT_EQ(prefill.failure->breaker_class, BreakerClass::kConnection);
  EXPECT_EQ(prefill.failure->evidence_iid, "x9");
  EXPECT_TRUE(prefill.failure->transient);
  EXPECT_THAT(prefill.failure->detail, StartsWith("engine unreachable"));

  const PrefillResult handoff = Handoff(client);
  Recorder rec;
  DecodeOutcome decode = client.Decode(dead, handoff, ChatBody(), true, Leg("r2"), rec);
  ASSERT_FALSE(decode.ok());
  EXPECT_EQ(decode.failure->phase, Phase::kDecode);
  EXPECT_EQ(nt::HttpStatus(*decode.failure), 502);
  EXPECT_EQ(decode.failure->breaker_class, BreakerClass::kConnection);
  EXPECT_EQ(decode.failure->evidence_iid, "x9");
  EXPECT_THAT(decode.failure->detail, StartsWith("engine unreachable"));
}

TEST_F(BeastEngineClientTest, B10_DropConnection) {
  Adapter client(FastOptions());
  SetFaults(*producer_, R"({"faults":[{"kind":"drop_connection"}]})");
  PrefillOutcome prefill = client.Prefill(p0_, Api::kCompletions, CompletionBody(), Leg("r1"));
  ASSERT_FALSE(prefill.ok());
  EXPECT_EQ(nt::HttpStatus(*prefill.failure), 502);
  EXPECT_EQ(prefill.failure->reason, FailureReason::kEngineConnection);
  EXPECT_EQ(prefill.failure->breaker_class, BreakerClass::kTimeout);
  EXPECT_EQ(prefill.failure->evidence_iid, "p0");
  EXPECT_TRUE(prefill.failure->transient);
  EXPECT_THAT(prefill.failure->detail, StartsWith("connection to engine lost"));

  Recorder rec;
  const EngineFailure f = DecodeFailure(client, R"({"faults":[{"kind":"drop_connection"}]})", rec);
  EXPECT_EQ(f.phase, Phase::kDecode);
  EXPECT_EQ(nt::HttpStatus(f), 502);
  EXPECT_EQ(f.reason, FailureReason::kEngineConnection);
  EXPECT_EQ(f.breaker_class, BreakerClass::kTimeout);
  EXPECT_TRUE(f.transient);
}

TEST_F(BeastEngineClientTest, B10_PrefillTimeout) {
  SetFaults(*producer_, R"({"faults":[{"kind":"silent_before_first_token"}]})");
  Adapter client(FastOptions());
  LegOptions leg = Leg("rid-p-slow");
  const MonoTime start = MonoClock::now();
  leg.leg_deadline = start + 300ms;
  PrefillOutcome out = client.Prefill(p0_, Api::kCompletions, CompletionBody(), leg);
  const double elapsed = SecondsSince(start);
  ASSERT_FALSE(out.ok());
  const EngineFailure& f = *out.failure;
  EXPECT_EQ(f.phase, Phase::kPrefill);
  EXPECT_EQ(nt::HttpStatus(f), 504);
  EXPECT_EQ(f.reason, FailureReason::kEngineTimeout);
  EXPECT_EQ(f.breaker_class, BreakerClass::kTimeout);
  EXPECT_EQ(f.evidence_iid, "p0");
  EXPECT_TRUE(f.transient);
  EXPECT_THAT(f.detail, StartsWith("prefill timed out"));
  EXPECT_GE(elapsed, 0.29);
  EXPECT_LT(elapsed, 5.0);
  // The engine saw its client go away.
  const json r = WaitForLastRecord(*producer_, Ended);
  ASSERT_FALSE(r.is_null());
  EXPECT_EQ(r["end"], "client_gone");
}

TEST_F(BeastEngineClientTest, B10_PrefillRequestDeadlineIsNotEngineEvidence) {
  SetFaults(*producer_, R"({"faults":[{"kind":"silent_before_first_token"}]})");
  Adapter client(FastOptions());
  LegOptions leg = Leg("rid-p-late");
  leg.request_deadline = MonoClock::now() + 300ms;
  leg.leg_deadline = MonoClock::now() + 60s;
  PrefillOutcome out = client.Prefill(p0_, Api::kCompletions, CompletionBody(), leg);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(nt::HttpStatus(*out.failure), 504);
  EXPECT_EQ(out.failure->reason, FailureReason::kDeadline);
  EXPECT_EQ(out.failure->breaker_class, BreakerClass::kNone);
  EXPECT_EQ(out.failure->evidence_iid, "");
  EXPECT_FALSE(out.failure->transient);
}

// --- B11: stream termination ----------------------------------------------------

TEST_F(BeastEngineClientTest, B11_DoneBeforeToken) {
  Adapter client(FastOptions());
  Recorder rec;
  const EngineFailure f =
      DecodeFailure(client, R"({"faults":[{"kind":"done_before_token"}]})", rec);
  EXPECT_EQ(f.phase, Phase::kDecode);
  EXPECT_EQ(nt::HttpStatus(f), 502);
  EXPECT_EQ(f.reason, FailureReason::kEngineError);
  EXPECT_EQ(f.breaker_class, BreakerClass::kStream);
  EXPECT_EQ(f.evidence_iid, "d0");
  EXPECT_TRUE(f.transient);
  EXPECT_EQ(f.detail, "stream ended with [DONE] before any token arrived");
  EXPECT_EQ(rec.tokens, 0);
}

TEST_F(BeastEngineClientTest, B11_CloseBeforeDone) {
  Adapter client(FastOptions());
  Recorder rec;
  const EngineFailure f =
      DecodeFailure(client, R"({"faults":[{"kind":"close_before_done","tokens":2}]})", rec);
  EXPECT_EQ(nt::HttpStatus(f), 502);
  EXPECT_EQ(f.reason, FailureReason::kEngineError);
  EXPECT_EQ(f.breaker_class, BreakerClass::kStream);
  EXPECT_TRUE(f.transient);
  EXPECT_THAT(f.detail, StartsWith("stream ended before the [DONE] terminator"));
  EXPECT_EQ(rec.tokens, 2) << "the tokens before the cut were delivered";
}

TEST_F(BeastEngineClientTest, B11_ErrorObjectKeepsItsStatus) {
  Adapter client(FastOptions());
  {
    Recorder rec;
    const EngineFailure f = DecodeFailure(
        client,
        R"({"faults":[{"kind":"error_in_stream","after_tokens":1,"code":503,"message":"engine overloaded"}]})",
        rec);
    EXPECT_EQ(f.phase, Phase::kDecode);
    EXPECT_EQ(nt::HttpStatus(f), 503);
    EXPECT_EQ(f.engine_status, 503);
    EXPECT_EQ(f.breaker_class, BreakerClass::kInferenceStatus);
    EXPECT_TRUE(f.transient);
    EXPECT_THAT(f.detail, HasSubstr("engine overloaded"));
    EXPECT_EQ(rec.tokens, 1);
  }
  {
    Recorder rec;
    const EngineFailure f = DecodeFailure(
        client, R"({"faults":[{"kind":"error_in_stream","after_tokens":0,"code":"bad_gateway"}]})",
        rec);
    EXPECT_EQ(nt::HttpStatus(f), 500) << "a non-integer code is a 500";
    EXPECT_EQ(rec.tokens, 0);
  }
}

// --- B12: first-token budget ----------------------------------------------------

TEST_F(BeastEngineClientTest, B12_SilentBeforeFirstToken) {
  Adapter client(FastOptions());
  Recorder rec;
  const MonoTime start = MonoClock::now();
  const EngineFailure f =
      DecodeFailure(client, R"({"faults":[{"kind":"silent_before_first_token"}]})", rec);
  const double elapsed = SecondsSince(start);
  EXPECT_EQ(f.phase, Phase::kDecode);
  EXPECT_EQ(nt::HttpStatus(f), 504);
  EXPECT_EQ(f.reason, FailureReason::kEngineTimeout);
  EXPECT_EQ(f.breaker_class, BreakerClass::kStream);
  EXPECT_EQ(f.evidence_iid, "d0");
  EXPECT_TRUE(f.transient);
  EXPECT_EQ(f.detail, "no first token within 0.5s: no frames at all");
  EXPECT_GE(elapsed, kFirstTokenS);
  EXPECT_LT(elapsed, 5.0);
  EXPECT_TRUE(rec.events.empty());
  const json r = WaitForLastRecord(*consumer_, Ended);
  ASSERT_FALSE(r.is_null());
  EXPECT_EQ(r["end"], "client_gone");
}

TEST_F(BeastEngineClientTest, B12_MetadataDoesNotStopFirstTokenClock) {
  // Metadata frames every 100 ms for 3 s: if they stopped or restarted the
  // clock, the leg would outlive the 0.5 s budget by far.
  consumer_ = StartSim({"--engine-id", "d0", "--token-interval-ms", "100"});
  ASSERT_NE(consumer_, nullptr);
  d0_ = EngineTarget{"d0", consumer_->url()};
  Adapter client(FastOptions());
  Recorder rec;
  const PrefillResult handoff = Handoff(client);
  SetFaults(*consumer_, R"({"faults":[{"kind":"metadata_then_silence","chunks":30}]})");
  const MonoTime start = MonoClock::now();
  DecodeOutcome out = client.Decode(d0_, handoff, ChatBody(), true, Leg("rid-d-md"), rec);
  const double elapsed = SecondsSince(start);
  ASSERT_FALSE(out.ok());
  const EngineFailure& f = *out.failure;
  EXPECT_EQ(nt::HttpStatus(f), 504);
  EXPECT_EQ(f.reason, FailureReason::kEngineTimeout);
  EXPECT_EQ(f.breaker_class, BreakerClass::kOverload) << "busy, not broken";
  EXPECT_THAT(f.detail, StartsWith("no first token within 0.5s: "));
  EXPECT_THAT(f.detail, HasSubstr(" metadata frame(s) but no token"));
  const int frames = rec.Count(EventKind::kMetadata);
  EXPECT_GE(frames, 1);
  EXPECT_LT(frames, 30);
  EXPECT_EQ(f.detail, "no first token within 0.5s: " + std::to_string(frames) +
                          " metadata frame(s) but no token");
  EXPECT_EQ(rec.tokens, 0);
  EXPECT_LT(elapsed, 2.5);
}

TEST_F(BeastEngineClientTest, B12_DelayedHeadersConsumeBudget) {
  Adapter client(FastOptions());
  Recorder rec;
  const PrefillResult handoff = Handoff(client);
  SetFaults(*consumer_, R"({"faults":[{"kind":"delay_headers","ms":3000}]})");
  const MonoTime start = MonoClock::now();
  DecodeOutcome out = client.Decode(d0_, handoff, ChatBody(), true, Leg("rid-d-dh"), rec);
  const double elapsed = SecondsSince(start);
  ASSERT_FALSE(out.ok()) << "headers after 3 s cannot meet a 0.5 s first-token budget";
  EXPECT_EQ(nt::HttpStatus(*out.failure), 504);
  EXPECT_EQ(out.failure->breaker_class, BreakerClass::kStream);
  EXPECT_EQ(out.failure->detail, "no first token within 0.5s: no frames at all");
  EXPECT_LT(elapsed, 2.5) << "the budget ran while the headers were awaited";
}

TEST_F(BeastEngineClientTest, B12_HeaderDelayWithinBudgetSucceeds) {
  HttpEngineClientOptions options = FastOptions();
  options.first_token_timeout_s = 3;
  Adapter client(options);
  const PrefillResult handoff = Handoff(client);
  SetFaults(*consumer_, R"({"faults":[{"kind":"delay_headers","ms":300}]})");
  Recorder rec;
  DecodeOutcome out = client.Decode(d0_, handoff, ChatBody(), true, Leg("rid-d-dh2"), rec);
  ASSERT_TRUE(out.ok()) << out.failure->detail;
  EXPECT_EQ(rec.tokens, kMaxTokens);
}

// --- B13: read timeout ----------------------------------------------------------

TEST_F(BeastEngineClientTest, B13_SilenceAfterFirstToken) {
  Adapter client(FastOptions());
  Recorder rec;
  const EngineFailure f =
      DecodeFailure(client, R"({"faults":[{"kind":"stall_after_tokens","tokens":2}]})", rec);
  EXPECT_EQ(f.phase, Phase::kDecode);
  EXPECT_EQ(nt::HttpStatus(f), 504);
  EXPECT_EQ(f.reason, FailureReason::kEngineTimeout);
  EXPECT_EQ(f.breaker_class, BreakerClass::kStream);
  EXPECT_TRUE(f.transient);
  EXPECT_EQ(f.detail,
            "engine went silent between tokens: nothing arrived within the 0.5s read timeout");
  EXPECT_EQ(rec.tokens, 2);
  const json r = WaitForLastRecord(*consumer_, Ended);
  ASSERT_FALSE(r.is_null());
  EXPECT_EQ(r["end"], "client_gone");
}

TEST_F(BeastEngineClientTest, B13_SlowButSteadyTokensDoNotTimeOut) {
  // 8 tokens 250 ms apart: 1.75 s in all, every gap under the 0.5 s timeout.
  HttpEngineClientOptions options = FastOptions();
  options.first_token_timeout_s = 3;
  Adapter client(options);
  const PrefillResult handoff = Handoff(client);
  SetFaults(*consumer_, R"({"faults":[{"kind":"slow_tokens","interval_ms":250}]})");
  json body = ChatBody();
  body["max_tokens"] = 8;
  body["max_completion_tokens"] = 8;
  Recorder rec;
  const MonoTime start = MonoClock::now();
  DecodeOutcome out = client.Decode(d0_, handoff, body, true, Leg("rid-d-slow"), rec);
  const double elapsed = SecondsSince(start);
  ASSERT_TRUE(out.ok()) << out.failure->detail;
  EXPECT_EQ(rec.tokens, 8);
  EXPECT_GT(elapsed, 3 * kReadS) << "the stream must outlast the read timeout to prove anything";
}

TEST_F(BeastEngineClientTest, B13_ZeroReadTimeoutUsesRequestDeadline) {
  HttpEngineClientOptions options = FastOptions();
  options.decode_read_timeout_s = 0;
  Adapter client(options);
  const PrefillResult handoff = Handoff(client);
  SetFaults(*consumer_, R"({"faults":[{"kind":"stall_after_tokens","tokens":1}]})");
  LegOptions leg = Leg("rid-d-zero");
  const MonoTime start = MonoClock::now();
  leg.request_deadline = start + 1500ms;
  Recorder rec;
  DecodeOutcome out = client.Decode(d0_, handoff, ChatBody(), true, leg, rec);
  const double elapsed = SecondsSince(start);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(nt::HttpStatus(*out.failure), 504);
  EXPECT_EQ(out.failure->reason, FailureReason::kDeadline);
  EXPECT_EQ(out.failure->breaker_class, BreakerClass::kNone);
  EXPECT_EQ(out.failure->evidence_iid, "");
  EXPECT_FALSE(out.failure->transient);
  EXPECT_EQ(rec.tokens, 1);
  EXPECT_GE(elapsed, 1.4) << "no read timeout may end the stream before the deadline";
  EXPECT_LT(elapsed, 6.0);
}

// B13: a client that is slow to take the relayed frames pauses the engine read
// (Flush), and that pause is not engine silence.
TEST_F(BeastEngineClientTest, B13_ClientBackPressureDoesNotTripReadTimeout) {
  Adapter client(FastOptions());
  const PrefillResult handoff = Handoff(client);
  Recorder rec;
  rec.flush_delay = std::chrono::milliseconds(static_cast<int>(3000 * kReadS));
  DecodeOutcome out = client.Decode(d0_, handoff, ChatBody(), true, Leg("rid-d-bp"), rec);
  ASSERT_TRUE(out.ok()) << out.failure->detail;
  EXPECT_TRUE(rec.delayed);
  EXPECT_EQ(rec.tokens, kMaxTokens);
}

// Frames already read are handed to the client before the next engine read:
// one Flush per read at most, and a final one before the leg ends.
TEST_F(BeastEngineClientTest, EveryReadIsFlushedBeforeTheLegEnds) {
  Adapter client(FastOptions());
  const PrefillResult handoff = Handoff(client);
  Recorder rec;
  DecodeOutcome out = client.Decode(d0_, handoff, ChatBody(), true, Leg("rid-d-fl"), rec);
  ASSERT_TRUE(out.ok()) << out.failure->detail;
  EXPECT_GE(rec.flushes, 1);
  EXPECT_LE(rec.flushes, static_cast<int>(rec.events.size()) + 1);
}

TEST_F(BeastEngineClientTest, ObserverStopEndsTheLegAsCancelled) {
  Adapter client(FastOptions());
  const PrefillResult handoff = Handoff(client);
  SetFaults(*consumer_, R"({"faults":[{"kind":"slow_tokens","interval_ms":200}]})");
  Recorder rec;
  rec.hook = [](const StreamEvent& e) { return e.kind != EventKind::kToken; };
  DecodeOutcome out = client.Decode(d0_, handoff, ChatBody(), true, Leg("rid-d-stop"), rec);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.failure->reason, FailureReason::kCancelled);
  EXPECT_EQ(out.failure->breaker_class, BreakerClass::kNone);
  EXPECT_FALSE(out.failure->transient);
  EXPECT_EQ(rec.tokens, 1);
  const json r = WaitForLastRecord(*consumer_, Ended);
  ASSERT_FALSE(r.is_null());
  EXPECT_EQ(r["end"], "client_gone");
}

// --- B19: cancellation ----------------------------------------------------------

// Steady load opens no new connection per leg: sequential legs reuse one
// keep-alive connection per engine (the count of idle ones stays at one).
TEST_F(BeastEngineClientTest, KeepAliveConnectionsAreReusedAcrossLegs) {
  Adapter client(FastOptions());
  for (int i = 0; i < 4; ++i) {
    const PrefillResult handoff = Handoff(client);
    Recorder rec;
    ASSERT_TRUE(client.Decode(d0_, handoff, ChatBody(), true, Leg("rid-d-ka"), rec).ok());
    EXPECT_EQ(client.IdleConnections(p0_.url), 1u) << "prefill " << i;
    // The decode's connection returns once its body ended (in the
    // background); the next leg must take it rather than open another.
    for (int w = 0; w < 500 && client.IdleConnections(d0_.url) == 0; ++w) {
      std::this_thread::sleep_for(10ms);
    }
    EXPECT_EQ(client.IdleConnections(d0_.url), 1u) << "decode " << i;
  }
}

// Idle connections are closed by the pool's sweep once they have been idle
// longer than an engine keeps them, so descriptors return to baseline after
// a load (on fake time: no test sleeps for the idle period).
TEST_F(BeastEngineClientTest, IdleConnectionsAreClosedBySweep) {
  testing::FakeClock clock;
  {
    Adapter client(FastOptions(), &clock);
    Handoff(client);
    ASSERT_EQ(client.IdleConnections(p0_.url), 1u);
    clock.Advance(std::chrono::seconds(1));
    EXPECT_EQ(client.IdleConnections(p0_.url), 1u) << "still fresh";
    clock.Advance(ConnectionPool::kMaxIdle);
    for (int i = 0; i < 100 && client.IdleConnections(p0_.url) > 0; ++i) {
      std::this_thread::sleep_for(5ms);  // the sweep runs on the adapter's loop
    }
    EXPECT_EQ(client.IdleConnections(p0_.url), 0u);
  }
}

// A leg that ends abnormally closes its connection instead of returning it:
// the engine, still holding its stalled stream open, sees the router hang up
// (a pooled connection would stay open), and the pool holds none.
TEST_F(BeastEngineClientTest, AnAbortedLegDoesNotPoolItsConnection) {
  Adapter client(FastOptions());
  const PrefillResult handoff = Handoff(client);
  SetFaults(*consumer_, R"({"faults":[{"kind":"stall_after_tokens","tokens":1}]})");
  Recorder rec;
  DecodeOutcome out = client.Decode(d0_, handoff, ChatBody(), true, Leg("rid-d-ab"), rec);
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.failure->detail, StartsWith("engine went silent between tokens"));
  const json r = WaitForLastRecord(*consumer_, Ended);
  ASSERT_FALSE(r.is_null()) << "the engine never saw the connection end";
  EXPECT_EQ(r["end"], "client_gone");
  EXPECT_EQ(client.IdleConnections(d0_.url), 0u);
}

// B19 after output started: the engine stalls after two tokens and the
// client goes away; the leg ends at once, not at the read timeout.
TEST_F(BeastEngineClientTest, B19_CancelMidStreamEndsTheLegPromptly) {
  HttpEngineClientOptions options = FastOptions();
  options.decode_read_timeout_s = 30;  // only the cancel can end this leg
  Adapter client(options);
  const PrefillResult handoff = Handoff(client);
  SetFaults(*consumer_, R"({"faults":[{"kind":"stall_after_tokens","tokens":2}]})");
  CancelToken cancel;
  Recorder rec;
  std::atomic<int> tokens{0};
  std::atomic<int> flushed_tokens{0};
  rec.hook = [&](const StreamEvent& e) {
    tokens += e.tokens;
    return true;
  };
  // The client sees the tokens before the engine stalls: each read is
  // flushed, not held until the leg ends.
  rec.flush_probe = [&] { flushed_tokens = rec.tokens; };
  std::thread canceller([&] {
    for (int i = 0; i < 500 && flushed_tokens.load() < 2; ++i) std::this_thread::sleep_for(10ms);
    std::this_thread::sleep_for(50ms);
    cancel.Cancel();
  });
  const MonoTime started = MonoClock::now();
  DecodeOutcome out =
      client.Decode(d0_, handoff, ChatBody(), true, Leg("rid-d-cancel2", &cancel), rec);
  canceller.join();
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.failure->reason, FailureReason::kCancelled) << out.failure->detail;
  EXPECT_EQ(flushed_tokens.load(), 2) << "both tokens reached the client before the stall";
  EXPECT_LT(Seconds(MonoClock::now() - started), 5.0);
}

TEST_F(BeastEngineClientTest, B19_CancelAbortsSilentDecodePromptly) {
  HttpEngineClientOptions options = FastOptions();
  options.first_token_timeout_s = 30;  // only the cancel can end this leg
  Adapter client(options);
  const PrefillResult handoff = Handoff(client);
  SetFaults(*consumer_, R"({"faults":[{"kind":"silent_before_first_token"}]})");

  CancelToken cancel;
  std::atomic<double> cancelled_wall{0};
  std::atomic<bool> cancelled_flag{false};
  MonoTime cancelled_mono;
  std::thread canceller([&] {
    // Cancel once the engine holds the request open.
    const json r = WaitForLastRecord(
        *consumer_, [](const json& rec) { return rec["phase"] == "decode" && !Ended(rec); });
    if (r.is_null()) ADD_FAILURE() << "the decode request never reached the engine";
    std::this_thread::sleep_for(100ms);
    cancelled_mono = MonoClock::now();
    cancelled_wall = WallSeconds();
    cancelled_flag = true;
    cancel.Cancel();
  });
  Recorder rec;
  DecodeOutcome out =
      client.Decode(d0_, handoff, ChatBody(), true, Leg("rid-d-cancel", &cancel), rec);
  const MonoTime returned = MonoClock::now();
  canceller.join();
  ASSERT_TRUE(cancelled_flag.load());
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.failure->reason, FailureReason::kCancelled);
  EXPECT_EQ(out.failure->breaker_class, BreakerClass::kNone);
  EXPECT_EQ(out.failure->evidence_iid, "");
  EXPECT_FALSE(out.failure->transient);
  const double return_latency = Seconds(returned - cancelled_mono);
  EXPECT_LT(return_latency, 1.0);

  const json r = WaitForLastRecord(*consumer_, Ended);
  ASSERT_FALSE(r.is_null());
  EXPECT_EQ(r["end"], "client_gone");
  const double close_latency = r["ended_at"].get<double>() - cancelled_wall.load();
  std::printf(
      "B19 decode: leg returned %.1f ms after cancel; engine saw the close %.1f ms after "
      "cancel\n",
      return_latency * 1000, close_latency * 1000);
  EXPECT_LT(close_latency, 1.0);
}

TEST_F(BeastEngineClientTest, B19_CancelAbortsSilentPrefill) {
  SetFaults(*producer_, R"({"faults":[{"kind":"silent_before_first_token"}]})");
  Adapter client(FastOptions());
  CancelToken cancel;
  MonoTime cancelled_at;
  std::thread canceller([&] {
    const json r = WaitForLastRecord(*producer_, [](const json& rec) { return !Ended(rec); });
    if (r.is_null()) ADD_FAILURE() << "the prefill request never reached the engine";
    cancelled_at = MonoClock::now();
    cancel.Cancel();
  });
  PrefillOutcome out =
      client.Prefill(p0_, Api::kCompletions, CompletionBody(), Leg("rid-p-cancel", &cancel));
  const MonoTime returned = MonoClock::now();
  canceller.join();
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.failure->reason, FailureReason::kCancelled);
  EXPECT_EQ(out.failure->breaker_class, BreakerClass::kNone);
  EXPECT_LT(Seconds(returned - cancelled_at), 1.0);
  const json r = WaitForLastRecord(*producer_, Ended);
  ASSERT_FALSE(r.is_null());
  EXPECT_EQ(r["end"], "client_gone");
}

// A cancel that lands while the leg is still being set up (registered with
// the token, request not yet on the wire) must not be lost. A large body
// widens that window; the cancel is swept across it. A lost cancel shows as
// a leg that runs on until its 5 s first-token budget.
TEST_F(BeastEngineClientTest, B19_CancelDuringLegSetupIsNotLost) {
  consumer_ = StartSim({"--engine-id", "d0", "--max-model-len", "1073741824", "--threads", "64"});
  ASSERT_NE(consumer_, nullptr);
  d0_ = EngineTarget{"d0", consumer_->url()};
  HttpEngineClientOptions options = FastOptions();
  options.first_token_timeout_s = 5;
  Adapter client(options);
  SetFaults(*consumer_, R"({"faults":[{"kind":"silent_before_first_token","times":-1}]})");
  json body = ChatBody();
  body["user"] = std::string(1 << 20, 'u');

  for (int step = 0; step < 20; ++step) {
    const PrefillResult handoff = Handoff(client);  // single use: one per decode
    const auto delay = std::chrono::microseconds(250 * step);
    CancelToken cancel;
    std::atomic<bool> go{false};
    MonoTime cancelled_at;
    std::thread canceller([&] {
      while (!go.load()) std::this_thread::yield();
      const MonoTime until = MonoClock::now() + delay;
      while (MonoClock::now() < until) std::this_thread::yield();
      cancelled_at = MonoClock::now();
      cancel.Cancel();
    });
    Recorder rec;
    go = true;
    DecodeOutcome out = client.Decode(d0_, handoff, body, true, Leg("rid-d-race", &cancel), rec);
    const MonoTime returned = MonoClock::now();
    canceller.join();
    ASSERT_FALSE(out.ok());
    ASSERT_EQ(out.failure->reason, FailureReason::kCancelled) << out.failure->detail;
    ASSERT_LT(Seconds(returned - cancelled_at), 1.0)
        << "cancel " << delay.count() << " us into the leg was lost: the leg ran on for "
        << Seconds(returned - cancelled_at) << " s";
  }
}

TEST_F(BeastEngineClientTest, B19_CancelDuringPrefillSetupIsNotLost) {
  producer_ = StartSim({"--engine-id", "p0", "--max-model-len", "1073741824", "--threads", "64"});
  ASSERT_NE(producer_, nullptr);
  p0_ = EngineTarget{"p0", producer_->url()};
  SetFaults(*producer_, R"({"faults":[{"kind":"silent_before_first_token","times":-1}]})");
  Adapter client(FastOptions());
  json body = CompletionBody();
  body["user"] = std::string(1 << 20, 'u');

  for (int step = 0; step < 20; ++step) {
    const auto delay = std::chrono::microseconds(250 * step);
    CancelToken cancel;
    std::atomic<bool> go{false};
    MonoTime cancelled_at;
    std::thread canceller([&] {
      while (!go.load()) std::this_thread::yield();
      const MonoTime until = MonoClock::now() + delay;
      while (MonoClock::now() < until) std::this_thread::yield();
      cancelled_at = MonoClock::now();
      cancel.Cancel();
    });
    LegOptions leg = Leg("rid-p-race", &cancel);
    leg.leg_deadline = MonoClock::now() + 5s;
    go = true;
    PrefillOutcome out = client.Prefill(p0_, Api::kCompletions, body, leg);
    const MonoTime returned = MonoClock::now();
    canceller.join();
    ASSERT_FALSE(out.ok());
    ASSERT_EQ(out.failure->reason, FailureReason::kCancelled) << out.failure->detail;
    ASSERT_LT(Seconds(returned - cancelled_at), 1.0)
        << "cancel " << delay.count() << " us into the leg was lost: the leg ran on for "
        << Seconds(returned - cancelled_at) << " s";
  }
}

TEST_F(BeastEngineClientTest, B19_AlreadyCancelledSendsNothing) {
  Adapter client(FastOptions());
  const PrefillResult handoff = Handoff(client);
  ASSERT_TRUE(producer_->ClearRequests().ok());
  CancelToken cancel;
  cancel.Cancel();
  PrefillOutcome prefill =
      client.Prefill(p0_, Api::kCompletions, CompletionBody(), Leg("r1", &cancel));
  ASSERT_FALSE(prefill.ok());
  EXPECT_EQ(prefill.failure->reason, FailureReason::kCancelled);
  Recorder rec;
  DecodeOutcome decode = client.Decode(d0_, handoff, ChatBody(), true, Leg("r2", &cancel), rec);
  ASSERT_FALSE(decode.ok());
  EXPECT_EQ(decode.failure->reason, FailureReason::kCancelled);
  EXPECT_TRUE(InferenceRecords(*producer_).empty());
  EXPECT_TRUE(InferenceRecords(*consumer_).empty());
}

// --- handoff expiry, credentials ------------------------------------------------

TEST_F(BeastEngineClientTest, ExpiredHandoffFailsLikeVllm) {
  producer_ = StartSim({"--engine-id", "p0", "--kv-lease-s", "0.3"});
  ASSERT_NE(producer_, nullptr);
  p0_ = EngineTarget{"p0", producer_->url()};
  Adapter client(FastOptions());
  const PrefillResult handoff = Handoff(client);
  std::this_thread::sleep_for(800ms);  // past the producer's 0.3 s lease

  Recorder rec;
  DecodeOutcome out = client.Decode(d0_, handoff, ChatBody(), true, Leg("rid-d-exp"), rec);
  ASSERT_FALSE(out.ok());
  const EngineFailure& f = *out.failure;
  EXPECT_EQ(f.phase, Phase::kDecode);
  EXPECT_EQ(nt::HttpStatus(f), 500) << "vLLM reports a failed KV load as an in-stream 500";
  EXPECT_EQ(f.engine_status, 500);
  EXPECT_EQ(f.breaker_class, BreakerClass::kInferenceStatus);
  EXPECT_EQ(f.evidence_iid, "d0");
  EXPECT_TRUE(f.transient);
  EXPECT_THAT(f.detail, StartsWith("engine stream error 500: "));
  EXPECT_EQ(rec.tokens, 0);

  absl::StatusOr<json> kv = producer_->Kv();
  ASSERT_TRUE(kv.ok());
  ASSERT_EQ((*kv)["expired"].size(), 1u);
  EXPECT_EQ((*kv)["expired"][0]["remote_request_id"], handoff.descriptor()["remote_request_id"]);
  EXPECT_TRUE((*kv)["consumed"].empty());
}

TEST_F(BeastEngineClientTest, ApiKeyIsSentAsBearerToken) {
  ASSERT_EQ(::setenv("NARWHAL_ENGINE_TEST_KEY", "sekret-1", 1), 0);
  producer_ = StartSim({"--engine-id", "p0", "--api-key-env", "NARWHAL_ENGINE_TEST_KEY"});
  ASSERT_NE(producer_, nullptr);
  p0_ = EngineTarget{"p0", producer_->url()};

  Adapter anonymous(FastOptions());
  PrefillOutcome refused = anonymous.Prefill(p0_, Api::kCompletions, CompletionBody(), Leg("r1"));
  ASSERT_FALSE(refused.ok());
  // The engine refuses the router, not the client: an engine fault (502),
  // evidence against the engine.
  EXPECT_EQ(nt::HttpStatus(*refused.failure), 502);
  EXPECT_EQ(refused.failure->engine_status, 401);
  EXPECT_EQ(refused.failure->cause, engines::FailureCause::kEngineRefusedRouter);
  EXPECT_THAT(refused.failure->detail,
              ::testing::StartsWith("engine returned HTTP 401: Unauthorized"));
  EXPECT_EQ(refused.failure->breaker_class, BreakerClass::kInferenceStatus);

  HttpEngineClientOptions options = FastOptions();
  options.api_key = "sekret-1";
  Adapter keyed(options);
  PrefillOutcome ok = keyed.Prefill(p0_, Api::kCompletions, CompletionBody(), Leg("r2"));
  ASSERT_TRUE(ok.ok()) << ok.failure->detail;
  const std::vector<json> records = InferenceRecords(*producer_);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[1]["headers"]["authorization"], "Bearer ***");
}

}  // namespace
}  // namespace narwhal::engines
