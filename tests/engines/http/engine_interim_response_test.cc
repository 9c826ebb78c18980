// Interim (1xx) responses from an engine, against a scripted loopback engine
// (tests/engines/http/raw_engine.h). A proxy in front of an engine may answer
// `100 Continue` (or `103 Early Hints`) before the engine's own response;
// HTTP/1.1 requires a client to skip such interim responses. The adapter does
// so on prefill, decode and control requests — at most four of them, so an
// engine cannot keep a leg reading interim heads — and a 1xx is never taken
// for the final answer (it used to fail the leg as the engine's fault:
// breaker evidence against a healthy engine).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
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
using ::testing::HasSubstr;
using namespace std::chrono_literals;

constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
constexpr std::string_view kEarlyHints =
    "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n";

json ValidDescriptor() {
  return json{{"do_remote_prefill", true},
              {"remote_engine_id", "p0"},
              {"remote_request_id", "rid-p-1a2b3c4d"},
              {"remote_block_ids", json::array({1, 2})},
              {"remote_host", "127.0.0.1"},
              {"remote_port", 5600}};
}

std::string JsonResponse(const json& body) {
  const std::string text = body.dump();
  return "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(text.size()) + "\r\nConnection: close\r\n\r\n" + text;
}

std::string PrefillAnswer() {
  return JsonResponse({{"id", "cmpl-1"},
                       {"object", "text_completion"},
                       {"choices", json::array({{{"index", 0}, {"text", "x"}}})},
                       {"kv_transfer_params", ValidDescriptor()}});
}

std::string Chunk(std::string_view data) {
  char size[32];
  std::snprintf(size, sizeof(size), "%zx\r\n", data.size());
  return size + std::string(data) + "\r\n";
}

std::string DecodeAnswer() {
  const std::string token = json{{"id", "c1"},
                                 {"object", "text_completion"},
                                 {"choices", json::array({{{"index", 0}, {"text", "Paris"}}})}}
                                .dump();
  return "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
         "Connection: close\r\n\r\n" +
         Chunk("data: " + token + "\n\n") + Chunk("data: [DONE]\n\n") + "0\r\n\r\n";
}

std::string Interims(int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += (i % 2 == 0) ? kContinue : kEarlyHints;
  return out;
}

class CountingObserver : public DecodeObserver {
 public:
  bool OnEvent(std::string_view, const StreamEvent& event) override {
    tokens += event.tokens;
    return true;
  }
  Awaitable<bool> Flush() override { co_return true; }
  int tokens = 0;
};

class EngineInterimResponseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HttpEngineClientOptions o;
    o.first_token_timeout_s = 5;
    o.decode_read_timeout_s = 5;
    o.connect_timeout_s = 2;
    async_ = std::make_unique<BeastEngineClient>(o, clock_);
    sync_ = std::make_unique<::narwhal::testing::BlockingLegs>(*async_, loops_.executor(0));
  }

  static LegOptions Leg() {
    LegOptions o;
    o.backend_request_id = "rid-interim";
    o.request_deadline = MonoClock::now() + 30s;
    o.leg_deadline = MonoClock::now() + 10s;
    return o;
  }

  static json Body() { return json{{"model", "m"}, {"prompt", "hi"}, {"max_tokens", 4}}; }

  PrefillOutcome Prefill(const RawEngine& engine) {
    return sync_->Prefill(EngineTarget{"p0", engine.url()}, Api::kCompletions, Body(), Leg());
  }

  DecodeOutcome Decode(const RawEngine& engine, CountingObserver& observer) {
    const PrefillResult handoff("p0", "http://127.0.0.1:1", Api::kCompletions, "rid-p",
                                "NixlConnector", ValidDescriptor());
    return sync_->Decode(EngineTarget{"d0", engine.url()}, handoff, Body(), true, Leg(), observer);
  }

  ControlResponse Health(const RawEngine& engine) {
    return sync_->Control(EngineTarget{"e0", engine.url()}, "GET", "/health", "", 5);
  }

  static void ExpectTooManyInterims(const std::optional<EngineFailure>& failure, Phase phase,
                                    std::string_view what) {
    ASSERT_TRUE(failure.has_value());
    EXPECT_EQ(failure->phase, phase);
    EXPECT_EQ(nt::HttpStatus(*failure), 502);
    EXPECT_EQ(failure->reason, FailureReason::kInvalidResponse);
    EXPECT_EQ(failure->breaker_class, BreakerClass::kInferenceStatus);
    EXPECT_EQ(failure->detail,
              std::string(what) + " came after more than 4 interim (1xx) responses");
  }

  RealClock clock_;
  IoLoops loops_{1};
  std::unique_ptr<BeastEngineClient> async_;
  std::unique_ptr<::narwhal::testing::BlockingLegs> sync_;
};

TEST_F(EngineInterimResponseTest, PrefillSkipsA100ContinueBeforeItsAnswer) {
  RawEngine engine(
      [](RawEngine::Connection& c) { c.Send(std::string(kContinue) + PrefillAnswer()); });
  const PrefillOutcome out = Prefill(engine);
  ASSERT_TRUE(out.ok()) << out.failure->detail;
  EXPECT_EQ(out.result->descriptor(), ValidDescriptor());
}

TEST_F(EngineInterimResponseTest, DecodeSkipsInterimResponsesBeforeItsStream) {
  RawEngine engine([](RawEngine::Connection& c) { c.Send(Interims(2) + DecodeAnswer()); });
  CountingObserver observer;
  const DecodeOutcome out = Decode(engine, observer);
  ASSERT_TRUE(out.ok()) << out.failure->detail;
  EXPECT_EQ(observer.tokens, 1);
}

// An interim head that arrives in its own write, apart from the answer.
TEST_F(EngineInterimResponseTest, InterimResponseInItsOwnPacketIsSkippedToo) {
  RawEngine engine([](RawEngine::Connection& c) {
    if (!c.Send(kContinue)) return;
    std::this_thread::sleep_for(50ms);
    c.Send(DecodeAnswer());
  });
  CountingObserver observer;
  const DecodeOutcome out = Decode(engine, observer);
  ASSERT_TRUE(out.ok()) << out.failure->detail;
  EXPECT_EQ(observer.tokens, 1);
}

TEST_F(EngineInterimResponseTest, ControlRequestsSkipInterimResponses) {
  RawEngine engine([](RawEngine::Connection& c) {
    c.Send(std::string(kContinue) + JsonResponse({{"status", "ok"}}));
  });
  const ControlResponse r = Health(engine);
  EXPECT_EQ(r.error, "");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(json::parse(r.body), json({{"status", "ok"}}));
}

TEST_F(EngineInterimResponseTest, FourInterimResponsesAreSkippedOnEveryLeg) {
  RawEngine prefill([](RawEngine::Connection& c) { c.Send(Interims(4) + PrefillAnswer()); });
  const PrefillOutcome p = Prefill(prefill);
  EXPECT_TRUE(p.ok()) << p.failure->detail;
  RawEngine decode([](RawEngine::Connection& c) { c.Send(Interims(4) + DecodeAnswer()); });
  CountingObserver observer;
  const DecodeOutcome d = Decode(decode, observer);
  EXPECT_TRUE(d.ok()) << d.failure->detail;
  RawEngine control([](RawEngine::Connection& c) {
    c.Send(Interims(4) + JsonResponse({{"status", "ok"}}));
  });
  EXPECT_EQ(Health(control).status, 200);
}

TEST_F(EngineInterimResponseTest, MoreThanFourInterimResponsesFailTheLeg) {
  RawEngine prefill([](RawEngine::Connection& c) { c.Send(Interims(5) + PrefillAnswer()); });
  ExpectTooManyInterims(Prefill(prefill).failure, Phase::kPrefill, "prefill response");
  RawEngine decode([](RawEngine::Connection& c) { c.Send(Interims(5) + DecodeAnswer()); });
  CountingObserver observer;
  ExpectTooManyInterims(Decode(decode, observer).failure, Phase::kDecode, "decode response");
  EXPECT_EQ(observer.tokens, 0);
  RawEngine control([](RawEngine::Connection& c) {
    c.Send(Interims(5) + JsonResponse({{"status", "ok"}}));
  });
  const ControlResponse r = Health(control);
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.error, "response came after more than 4 interim (1xx) responses");
}

// A protocol switch the router never asked for is no interim answer: the
// leg fails on it rather than wait for another head.
TEST_F(EngineInterimResponseTest, UnaskedSwitchingProtocolsIsAFinalFailure) {
  RawEngine engine([](RawEngine::Connection& c) {
    c.Send("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n");
  });
  const PrefillOutcome out = Prefill(engine);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(nt::HttpStatus(*out.failure), 502);
  EXPECT_EQ(out.failure->engine_status, 101);
  EXPECT_THAT(out.failure->detail, HasSubstr("engine returned HTTP 101"));
}

}  // namespace
}  // namespace narwhal::engines
