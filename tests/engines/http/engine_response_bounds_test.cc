// What the engine adapter takes from a hostile or broken engine, against a
// scripted loopback engine (tests/engines/http/raw_engine.h):
//  - engine text (a 4xx body, an in-stream error message) reaches a failure
//    only as well-formed UTF-8 within kMaxEngineTextBytes, and an engine 4xx
//    keeps its status (B10) whatever bytes its body holds;
//  - every bound on a response (header fields and bytes, trailers, chunk
//    framing, prefill and control bodies, SSE events, choices per decode
//    chunk) fails the leg with a 502 (or a control error) naming the bound,
//    and the leg ends before the engine could send the oversized response:
//    the engine's writes stop far short of it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <thread>

#include "engines/api.h"
#include "engines/engine_client.h"
#include "engines/engine_failure.h"
#include "engines/http/beast_engine_client.h"
#include "engines/http/http_options.h"
#include "engines/http/io_loops.h"
#include "engines/prefill_result.h"
#include "engines/run_blocking.h"
#include "engines/stream_event.h"
#include "tests/engines/http/raw_engine.h"
#include "tests/fakes/blocking_legs.h"
#include "tests/fakes/edge_status.h"

namespace narwhal::engines {
namespace {

namespace nt = ::narwhal::testing;

using json = nlohmann::json;
using ::narwhal::testing::RawEngine;
using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using namespace std::chrono_literals;

// An oversized response is this large; a leg that stops at its bound lets
// the engine write at most a few socket buffers of it.
constexpr size_t kHuge = 64u << 20;
constexpr size_t kFarShortOfHuge = 8u << 20;

const std::string kEuro = "\xE2\x82\xAC";  // U+20AC, three bytes
const std::string kFffd = "\xEF\xBF\xBD";  // U+FFFD

std::string Response(int status, std::string_view reason, std::string_view body,
                     std::string_view content_type = "application/json") {
  return "HTTP/1.1 " + std::to_string(status) + " " + std::string(reason) +
         "\r\nContent-Type: " + std::string(content_type) +
         "\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" +
         std::string(body);
}

constexpr std::string_view kStreamHead =
    "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
    "Connection: close\r\n\r\n";

std::string ChunkFrame(std::string_view data) {
  char size[32];
  std::snprintf(size, sizeof(size), "%zx\r\n", data.size());
  return size + std::string(data) + "\r\n";
}

std::string Event(std::string_view payload) {
  return ChunkFrame("data: " + std::string(payload) + "\n\n");
}

std::string TokenEvent(int index = 0, std::string_view text = "Paris") {
  return Event(json{{"id", "c1"},
                    {"object", "text_completion"},
                    {"choices", json::array({{{"index", index}, {"text", text}}})}}
                   .dump());
}

std::string DoneAndEnd() { return Event("[DONE]") + "0\r\n\r\n"; }

// A JSON error body as vLLM shapes it.
std::string ErrorBody(std::string_view message) {
  // Built by hand: nlohmann would refuse to dump an ill-formed message.
  return R"({"error":{"message":")" + std::string(message) +
         R"(","type":"BadRequestError","code":400}})";
}

// The client-facing error document of a failure: must serialise as is.
std::string ClientErrorJson(const EngineFailure& f) {
  return json{{"error", {{"message", f.detail}, {"code", nt::HttpStatus(f)}}}}.dump();
}

// A descriptor the contract accepts (engines/descriptor_contract.h).
json BoundsDescriptor() {
  return json{{"do_remote_prefill", true},
              {"remote_engine_id", "p0"},
              {"remote_request_id", "rid-p-1a2b3c4d"},
              {"remote_block_ids", json::array({1, 2})},
              {"remote_host", "127.0.0.1"},
              {"remote_port", 1}};
}

class BoundsObserver : public DecodeObserver {
 public:
  bool OnEvent(std::string_view, const StreamEvent& event) override {
    ++events;
    tokens += event.tokens;
    return true;
  }
  Awaitable<bool> Flush() override { co_return true; }
  int events = 0;
  int tokens = 0;
};

class EngineResponseBoundsTest : public ::testing::Test {
 protected:
  static HttpEngineClientOptions Options() {
    HttpEngineClientOptions o;
    o.first_token_timeout_s = 5;
    o.decode_read_timeout_s = 5;
    o.connect_timeout_s = 2;
    return o;
  }

  void StartClient(HttpEngineClientOptions options = Options()) {
    async_ = std::make_unique<BeastEngineClient>(std::move(options), clock_);
    sync_ = std::make_unique<::narwhal::testing::BlockingLegs>(*async_, loops_.executor(0));
  }

  void SetUp() override { StartClient(); }

  static LegOptions Leg() {
    LegOptions o;
    o.backend_request_id = "rid-bounds";
    o.request_deadline = MonoClock::now() + 30s;
    return o;
  }

  static json Body() { return json{{"model", "m"}, {"prompt", "hi"}, {"max_tokens", 4}}; }

  EngineFailure PrefillFailure(const RawEngine& engine) {
    const PrefillOutcome out =
        sync_->Prefill(EngineTarget{"p0", engine.url()}, Api::kCompletions, Body(), Leg());
    EXPECT_FALSE(out.ok()) << "the prefill leg was expected to fail";
    return out.failure.value_or(EngineFailure{});
  }

  EngineFailure DecodeFailure(const RawEngine& engine, BoundsObserver* observer = nullptr) {
    BoundsObserver local;
    const PrefillResult handoff("p0", "http://127.0.0.1:1", Api::kCompletions, "rid-p",
                                "NixlConnector", BoundsDescriptor());
    const DecodeOutcome out =
        sync_->Decode(EngineTarget{"d0", engine.url()}, handoff, Body(), /*client_streams=*/true,
                      Leg(), observer != nullptr ? *observer : local);
    EXPECT_FALSE(out.ok()) << "the decode leg was expected to fail";
    return out.failure.value_or(EngineFailure{});
  }

  DecodeOutcome Decode(const RawEngine& engine, BoundsObserver& observer) {
    const PrefillResult handoff("p0", "http://127.0.0.1:1", Api::kCompletions, "rid-p",
                                "NixlConnector", BoundsDescriptor());
    return sync_->Decode(EngineTarget{"d0", engine.url()}, handoff, Body(), true, Leg(), observer);
  }

  // A 502 failure of a bound: not evidence-free, not an engine status.
  static void ExpectBoundFailure(const EngineFailure& f, Phase phase, std::string_view detail) {
    EXPECT_EQ(f.phase, phase);
    EXPECT_EQ(nt::HttpStatus(f), 502);
    EXPECT_EQ(f.engine_status, 0);
    EXPECT_EQ(f.reason, FailureReason::kInvalidResponse);
    EXPECT_NE(f.breaker_class, BreakerClass::kNone);
    EXPECT_THAT(f.detail, HasSubstr(std::string(detail)));
  }

  RealClock clock_;
  IoLoops loops_{1};
  std::unique_ptr<BeastEngineClient> async_;
  std::unique_ptr<::narwhal::testing::BlockingLegs> sync_;
};

// --- Engine text: well-formed UTF-8, the engine's status kept (B10) --------------

TEST_F(EngineResponseBoundsTest, B10_Prefill400WithInvalidUtf8KeepsStatusAndGetsValidText) {
  RawEngine engine([](RawEngine::Connection& c) {
    c.Send(Response(400, "Bad Request", "prompt \xFF\xFE is \xC3 bad", "text/plain"));
  });
  const EngineFailure f = PrefillFailure(engine);
  EXPECT_EQ(nt::HttpStatus(f), 400);
  EXPECT_EQ(f.engine_status, 400);
  EXPECT_EQ(f.reason, FailureReason::kEngineRejected);
  EXPECT_EQ(f.breaker_class, BreakerClass::kNone);
  EXPECT_TRUE(IsValidUtf8(f.detail));
  EXPECT_EQ(f.detail, "prompt " + kFffd + kFffd + " is " + kFffd + " bad");
  EXPECT_NO_THROW(ClientErrorJson(f));
}

TEST_F(EngineResponseBoundsTest, B10_Prefill400MultibyteMessageCutAtTheLimit) {
  std::string message;
  while (message.size() < 3 * kMaxEngineTextBytes) message += kEuro;
  RawEngine engine(
      [&](RawEngine::Connection& c) { c.Send(Response(400, "Bad Request", ErrorBody(message))); });
  const EngineFailure f = PrefillFailure(engine);
  EXPECT_EQ(nt::HttpStatus(f), 400);
  EXPECT_TRUE(IsValidUtf8(f.detail));
  EXPECT_LE(f.detail.size(), kMaxEngineTextBytes);
  EXPECT_THAT(f.detail, EndsWith("..."));
  EXPECT_THAT(message, StartsWith(f.detail.substr(0, f.detail.size() - 3)));
  EXPECT_NO_THROW(ClientErrorJson(f));
}

TEST_F(EngineResponseBoundsTest, B10_Prefill400RawTextCutInsideACharacter) {
  // ASCII up to 4 bytes short of the bound, then three-byte characters: a
  // byte cut at the bound would end inside one.
  std::string text(kMaxEngineTextBytes - 4, 'a');
  for (int i = 0; i < 10; ++i) text += kEuro;
  RawEngine engine([&](RawEngine::Connection& c) {
    c.Send(Response(422, "Unprocessable Entity", text, "text/plain"));
  });
  const EngineFailure f = PrefillFailure(engine);
  EXPECT_EQ(nt::HttpStatus(f), 422);
  EXPECT_TRUE(IsValidUtf8(f.detail));
  EXPECT_LE(f.detail.size(), kMaxEngineTextBytes);
  EXPECT_EQ(f.detail, std::string(kMaxEngineTextBytes - 4, 'a') + "...");
}

TEST_F(EngineResponseBoundsTest, B10_Decode400WithInvalidUtf8AndCutMultibyteText) {
  std::string text = "bad \xE2\x82 byte: ";
  while (text.size() < 2 * kMaxEngineTextBytes) text += "\xC3\xA9";  // é
  RawEngine engine(
      [&](RawEngine::Connection& c) { c.Send(Response(400, "Bad Request", text, "text/plain")); });
  const EngineFailure f = DecodeFailure(engine);
  EXPECT_EQ(f.phase, Phase::kDecode);
  EXPECT_EQ(nt::HttpStatus(f), 400);
  EXPECT_EQ(f.reason, FailureReason::kEngineRejected);
  EXPECT_TRUE(IsValidUtf8(f.detail));
  EXPECT_LE(f.detail.size(), kMaxEngineTextBytes);
  EXPECT_THAT(f.detail, StartsWith("bad " + kFffd + " byte: \xC3\xA9"));
  EXPECT_NO_THROW(ClientErrorJson(f));
}

TEST_F(EngineResponseBoundsTest, B10_DecodeErrorStatusWithAnEmptyBodyEndsAtOnce) {
  // A 503 with nothing after its head, on a connection the engine keeps
  // open: the leg ends with the status, not at the 5 s first-token budget.
  RawEngine engine([&](RawEngine::Connection& c) {
    c.Send("HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n");
    std::this_thread::sleep_for(3s);
  });
  const MonoTime start = MonoClock::now();
  const EngineFailure f = DecodeFailure(engine);
  EXPECT_LT(Seconds(MonoClock::now() - start), 2.0) << f.detail;
  EXPECT_EQ(f.phase, Phase::kDecode);
  EXPECT_EQ(f.engine_status, 503);
  EXPECT_EQ(nt::HttpStatus(f), 502);
}

TEST_F(EngineResponseBoundsTest, B11_InStreamErrorMessageIsBoundedText) {
  std::string message;
  while (message.size() < 100 * 1024) message += kEuro;
  RawEngine engine([&](RawEngine::Connection& c) {
    c.Send(std::string(kStreamHead) + Event(ErrorBody(message)) + "0\r\n\r\n");
  });
  const EngineFailure f = DecodeFailure(engine);
  EXPECT_EQ(nt::HttpStatus(f), 400);  // the error object's own code (B11)
  EXPECT_EQ(f.reason, FailureReason::kEngineRejected);
  EXPECT_TRUE(IsValidUtf8(f.detail));
  EXPECT_LE(f.detail.size(), kMaxEngineTextBytes);
  EXPECT_THAT(f.detail, StartsWith(kEuro + kEuro));
  EXPECT_THAT(f.detail, EndsWith("..."));
}

// --- Header fields and bytes, on every leg --------------------------------------

// A header block of `fields` short fields, announcing a huge body.
std::string ManyFieldsHead(int fields) {
  std::string head = "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(kHuge) + "\r\n";
  for (int i = 0; i < fields; ++i) head += "x-" + std::to_string(i) + ": v\r\n";
  return head + "\r\n";
}

TEST_F(EngineResponseBoundsTest, PrefillHeaderFieldCountIsBounded) {
  RawEngine engine([&](RawEngine::Connection& c) {
    if (c.Send(ManyFieldsHead(200))) c.SendRepeated(" ", kHuge);
  });
  const EngineFailure f = PrefillFailure(engine);
  ExpectBoundFailure(f, Phase::kPrefill, "prefill response has more than 100 header fields");
  EXPECT_LT(engine.bytes_sent(), kFarShortOfHuge);
}

TEST_F(EngineResponseBoundsTest, DecodeHeaderFieldCountIsBounded) {
  RawEngine engine([&](RawEngine::Connection& c) {
    if (c.Send(ManyFieldsHead(101))) c.SendRepeated(" ", kHuge);
  });
  const EngineFailure f = DecodeFailure(engine);
  ExpectBoundFailure(f, Phase::kDecode, "decode response has more than 100 header fields");
  EXPECT_LT(engine.bytes_sent(), kFarShortOfHuge);
}

TEST_F(EngineResponseBoundsTest, HundredFieldsAreAccepted) {
  RawEngine engine([&](RawEngine::Connection& c) {
    std::string head = "HTTP/1.1 503 Busy\r\nContent-Length: 4\r\n";
    for (int i = 0; i < 99; ++i) head += "x-" + std::to_string(i) + ": v\r\n";
    c.Send(head + "\r\nbusy");
  });
  const EngineFailure f = PrefillFailure(engine);
  EXPECT_EQ(f.engine_status, 503);
  EXPECT_EQ(f.detail, "engine returned HTTP 503: busy");
}

TEST_F(EngineResponseBoundsTest, ConfiguredFieldBoundIsApplied) {
  HttpEngineClientOptions o = Options();
  o.max_header_fields = 10;
  StartClient(o);
  RawEngine engine([&](RawEngine::Connection& c) { c.Send(ManyFieldsHead(10)); });
  const EngineFailure f = PrefillFailure(engine);
  ExpectBoundFailure(f, Phase::kPrefill, "prefill response has more than 10 header fields");
}

TEST_F(EngineResponseBoundsTest, ControlHeaderFieldCountIsBounded) {
  RawEngine engine([&](RawEngine::Connection& c) {
    if (c.Send(ManyFieldsHead(200))) c.SendRepeated(" ", kHuge);
  });
  const ControlResponse r =
      sync_->Control(EngineTarget{"e0", engine.url()}, "GET", "/health", "", /*timeout_s=*/10);
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.error, "response has more than 100 header fields");
  EXPECT_LT(engine.bytes_sent(), kFarShortOfHuge);
}

// A million header fields: Beast parses a header block only once it is
// complete, so the byte bound stops the flood after 64 KiB.
TEST_F(EngineResponseBoundsTest, PrefillHeaderFloodIsStoppedByTheByteBound) {
  std::atomic<bool> complete{false};
  RawEngine engine([&](RawEngine::Connection& c) {
    complete = c.Send("HTTP/1.1 200 OK\r\n") && c.SendRepeated("x-f: v\r\n", kHuge);
  });
  const EngineFailure f = PrefillFailure(engine);
  ExpectBoundFailure(f, Phase::kPrefill, "prefill response headers exceed 65536 bytes");
  EXPECT_FALSE(complete.load());
  EXPECT_LT(engine.bytes_sent(), kFarShortOfHuge);
}

TEST_F(EngineResponseBoundsTest, DecodeHeaderFloodIsStoppedByTheByteBound) {
  RawEngine engine([&](RawEngine::Connection& c) {
    if (c.Send("HTTP/1.1 200 OK\r\n")) c.SendRepeated("x-f: v\r\n", kHuge);
  });
  const EngineFailure f = DecodeFailure(engine);
  ExpectBoundFailure(f, Phase::kDecode, "decode response headers exceed 65536 bytes");
  EXPECT_LT(engine.bytes_sent(), kFarShortOfHuge);
}

TEST_F(EngineResponseBoundsTest, ControlHeaderFloodIsStoppedByTheByteBound) {
  RawEngine engine([&](RawEngine::Connection& c) {
    if (c.Send("HTTP/1.1 200 OK\r\n")) c.SendRepeated("x-f: v\r\n", kHuge);
  });
  const ControlResponse r =
      sync_->Control(EngineTarget{"e0", engine.url()}, "GET", "/health", "", 10);
  EXPECT_EQ(r.error, "response headers exceed 65536 bytes");
  EXPECT_LT(engine.bytes_sent(), kFarShortOfHuge);
}

TEST_F(EngineResponseBoundsTest, PrefillHeaderBytesAreBounded) {
  RawEngine engine([&](RawEngine::Connection& c) {
    if (c.Send("HTTP/1.1 200 OK\r\nx-big: ")) c.SendRepeated("v", kHuge);
  });
  const EngineFailure f = PrefillFailure(engine);
  ExpectBoundFailure(f, Phase::kPrefill, "prefill response headers exceed 65536 bytes");
  EXPECT_LT(engine.bytes_sent(), kFarShortOfHuge);
}

TEST_F(EngineResponseBoundsTest, DecodeHeaderBytesAreBounded) {
  RawEngine engine([&](RawEngine::Connection& c) {
    if (c.Send("HTTP/1.1 200 OK\r\nx-big: ")) c.SendRepeated("v", kHuge);
  });
  const EngineFailure f = DecodeFailure(engine);
  ExpectBoundFailure(f, Phase::kDecode, "decode response headers exceed 65536 bytes");
  EXPECT_LT(engine.bytes_sent(), kFarShortOfHuge);
}

// --- Chunked framing: trailers and chunk headers --------------------------------

TEST_F(EngineResponseBoundsTest, TrailerFieldsCountTowardTheFieldBound) {
  std::string trailer;
  for (int i = 0; i < 200; ++i) trailer += "x-t" + std::to_string(i) + ": v\r\n";
  RawEngine engine([&](RawEngine::Connection& c) {
    c.Send(std::string(kStreamHead) + TokenEvent() + "0\r\n" + trailer + "\r\n");
  });
  BoundsObserver observer;
  const EngineFailure f = DecodeFailure(engine, &observer);
  ExpectBoundFailure(f, Phase::kDecode, "decode response has more than 100 header fields");
  EXPECT_EQ(observer.tokens, 1);
}

TEST_F(EngineResponseBoundsTest, EndlessTrailerIsBounded) {
  RawEngine engine([&](RawEngine::Connection& c) {
    if (c.Send(std::string(kStreamHead) + TokenEvent() + "0\r\n")) {
      c.SendRepeated("x-t: v\r\n", kHuge);
    }
  });
  const EngineFailure f = DecodeFailure(engine);
  ExpectBoundFailure(f, Phase::kDecode,
                     "decode response framing (a chunk header or trailer) exceeds 131072 bytes");
  EXPECT_LT(engine.bytes_sent(), kFarShortOfHuge);
}

TEST_F(EngineResponseBoundsTest, EndlessChunkExtensionIsBounded) {
  RawEngine engine([&](RawEngine::Connection& c) {
    if (c.Send(std::string(kStreamHead) + TokenEvent() + "10;x=y")) c.SendRepeated(";a=b", kHuge);
  });
  const EngineFailure f = DecodeFailure(engine);
  ExpectBoundFailure(f, Phase::kDecode,
                     "decode response framing (a chunk header or trailer) exceeds 131072 bytes");
  EXPECT_LT(engine.bytes_sent(), kFarShortOfHuge);
}

// --- Bodies: prefill and control (non-streaming) --------------------------------

TEST_F(EngineResponseBoundsTest, PrefillContentLengthPastTheBodyBoundFailsAtTheHeader) {
  RawEngine engine([&](RawEngine::Connection& c) {
    if (c.Send("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
               std::to_string(kHuge) + "\r\n\r\n")) {
      c.SendRepeated(" ", kHuge);
    }
  });
  const EngineFailure f = PrefillFailure(engine);
  EXPECT_EQ(nt::HttpStatus(f), 502);
  EXPECT_EQ(f.detail, "no handoff: prefill response exceeds 16777216 bytes");
  EXPECT_LT(engine.bytes_sent(), kFarShortOfHuge);
}

TEST_F(EngineResponseBoundsTest, PrefillChunkedBodyIsBoundedWhileItArrives) {
  HttpEngineClientOptions o = Options();
  o.max_response_bytes = 1 << 20;
  StartClient(o);
  RawEngine engine([&](RawEngine::Connection& c) {
    if (c.Send("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
               "Transfer-Encoding: chunked\r\n\r\n")) {
      c.SendRepeated(ChunkFrame(std::string(4096, ' ')), kHuge);
    }
  });
  const EngineFailure f = PrefillFailure(engine);
  EXPECT_EQ(nt::HttpStatus(f), 502);
  EXPECT_EQ(f.detail, "no handoff: prefill response exceeds 1048576 bytes");
  EXPECT_LT(engine.bytes_sent(), kFarShortOfHuge);
}

TEST_F(EngineResponseBoundsTest, ControlBodyIsBounded) {
  RawEngine engine([&](RawEngine::Connection& c) {
    if (c.Send("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
               "Transfer-Encoding: chunked\r\n\r\n")) {
      c.SendRepeated(ChunkFrame(std::string(4096, ' ')), kHuge);
    }
  });
  const ControlResponse r =
      sync_->Control(EngineTarget{"e0", engine.url()}, "GET", "/v1/models", "", 10);
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.error, "response exceeds 16777216 bytes");
  EXPECT_LT(engine.bytes_sent(), (16u << 20) + kFarShortOfHuge);
}

// --- SSE events -----------------------------------------------------------------

TEST_F(EngineResponseBoundsTest, SseEventIsBounded) {
  HttpEngineClientOptions o = Options();
  o.max_event_bytes = 1 << 20;
  StartClient(o);
  RawEngine engine([&](RawEngine::Connection& c) {
    if (c.Send(std::string(kStreamHead) + TokenEvent() + ChunkFrame("data: {\"x\":\""))) {
      c.SendRepeated(ChunkFrame(std::string(4096, 'a')), kHuge);
    }
  });
  const EngineFailure f = DecodeFailure(engine);
  EXPECT_EQ(nt::HttpStatus(f), 502);
  EXPECT_EQ(f.detail, "malformed stream: SSE event exceeds 1048576 bytes");
  EXPECT_LT(engine.bytes_sent(), kFarShortOfHuge);
}

// B13 over a real socket and clock: after a token the engine drips one byte
// of an event that never ends every 50 ms, for up to 5 s. The 0.3 s read
// timeout counts from the last complete event, so the leg fails as engine
// silence well before the drip ends and the engine's writes stop.
TEST_F(EngineResponseBoundsTest, B13_ByteDripInsideAnEventIsSilence) {
  HttpEngineClientOptions o = Options();
  o.decode_read_timeout_s = 0.3;
  StartClient(o);
  std::atomic<int> dripped{0};
  RawEngine engine([&](RawEngine::Connection& c) {
    if (!c.Send(std::string(kStreamHead) + TokenEvent())) return;
    const std::string partial = "data: {\"id\":\"c1\",\"object\":\"text_completion\"";
    for (int i = 0; i < 100; ++i) {
      std::this_thread::sleep_for(50ms);
      if (!c.Send(ChunkFrame(partial.substr(i % partial.size(), 1)))) return;
      ++dripped;
    }
  });
  BoundsObserver observer;
  const auto started = std::chrono::steady_clock::now();
  const EngineFailure f = DecodeFailure(engine, &observer);
  const auto took = std::chrono::steady_clock::now() - started;
  EXPECT_EQ(nt::HttpStatus(f), 504);
  EXPECT_EQ(f.breaker_class, BreakerClass::kStream);
  EXPECT_THAT(f.detail, StartsWith("engine went silent between tokens"));
  EXPECT_EQ(observer.tokens, 1);
  EXPECT_LT(took, 2s);
  EXPECT_LT(dripped.load(), 50);
}

TEST_F(EngineResponseBoundsTest, DefaultBoundsAreDocumentedValues) {
  const HttpEngineClientOptions o;
  EXPECT_EQ(o.max_header_bytes, 64u * 1024);
  EXPECT_EQ(o.max_header_fields, 100);
  EXPECT_EQ(o.max_response_bytes, 16u << 20);
  EXPECT_EQ(o.max_event_bytes, 16u << 20);
  EXPECT_EQ(kMaxChoices, 16);
}

// --- Choices per decode chunk ---------------------------------------------------

TEST_F(EngineResponseBoundsTest, DecodeChunkWithTooManyChoicesFailsTheLeg) {
  json choices = json::array();
  for (int i = 0; i < kMaxChoices + 1; ++i) choices.push_back({{"index", 0}, {"text", "a"}});
  RawEngine engine([&](RawEngine::Connection& c) {
    c.Send(std::string(kStreamHead) + Event(json{{"choices", choices}}.dump()) + DoneAndEnd());
  });
  BoundsObserver observer;
  const EngineFailure f = DecodeFailure(engine, &observer);
  ExpectBoundFailure(f, Phase::kDecode, "decode chunk carries 17 choices; at most 16 are accepted");
  EXPECT_EQ(observer.events, 0);  // the chunk reached nobody
}

TEST_F(EngineResponseBoundsTest, StrayChoiceIndexFailsTheLegBeforeTheRestArrives) {
  // 100k chunks, each with a new choice index: the first one past the bound
  // ends the leg.
  std::atomic<bool> complete{false};
  RawEngine engine([&](RawEngine::Connection& c) {
    bool ok = c.Send(std::string(kStreamHead) + TokenEvent(0));
    for (int i = 1; ok && i < 100000; ++i) ok = c.Send(TokenEvent(i, "x"));
    complete = ok && c.Send(DoneAndEnd());
  });
  BoundsObserver observer;
  const EngineFailure f = DecodeFailure(engine, &observer);
  ExpectBoundFailure(f, Phase::kDecode,
                     "decode chunk has choice index 16; choice indexes must be in 0..15");
  EXPECT_EQ(observer.events, kMaxChoices);
  EXPECT_FALSE(complete.load());
  EXPECT_LT(engine.bytes_sent(), 2u << 20);  // of about 8 MB
}

TEST_F(EngineResponseBoundsTest, ChoicesWithinTheBoundAreRelayed) {
  json choices = json::array();
  for (int i = 0; i < kMaxChoices; ++i) choices.push_back({{"index", i}, {"text", "a"}});
  RawEngine engine([&](RawEngine::Connection& c) {
    c.Send(std::string(kStreamHead) + Event(json{{"choices", choices}}.dump()) + DoneAndEnd());
  });
  BoundsObserver observer;
  const DecodeOutcome out = Decode(engine, observer);
  EXPECT_TRUE(out.ok()) << (out.failure ? out.failure->detail : "");
  EXPECT_EQ(observer.tokens, kMaxChoices);
}

}  // namespace
}  // namespace narwhal::engines
