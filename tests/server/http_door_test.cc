// The HTTP front door (server/http/openai_shim) on loopback, on the real router
// core with a scripted engine client: what clients see (statuses, headers,
// SSE framing, journal rows) and how the door holds under abuse — slow or
// endless heads, pipelining, oversized and chunked bodies, conflicting
// framings, connection floods — with short timeouts so the suite stays fast.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "server/http/openai_shim.h"
#include "tests/fakes/fake_clock.h"
#include "tests/server/http_door_harness.h"

namespace narwhal::server::http_door_test {
namespace {

// ---------------------------------------------------------------------------
// What clients see.

TEST_F(HttpDoorTest, ServesHealthReadyModelsMetricsAnd404OnOneConnection) {
  Start();
  auto c = Connect();
  c->Send(Get("/health"));
  auto r = c->Read();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(json::parse(r->body), json({{"status", "ok"}}));
  EXPECT_TRUE(r->keep_alive);

  c->Send(Get("/ready?probe=1"));
  r = c->Read();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(json::parse(r->body)["status"], "ready");

  c->Send(Get("/v1/models"));
  r = c->Read();
  ASSERT_TRUE(r);
  EXPECT_EQ(json::parse(r->body)["data"][0]["id"], "m");

  c->Send(Get("/metrics"));
  r = c->Read();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->Header("content-type").rfind("text/plain", 0), 0u);

  std::vector<std::string> ids;
  for (const std::string& request : {Get("/nope"), Get("/v1/completions")}) {
    c->Send(request);
    r = c->Read();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 404);
    // Every response carries a request id of its own.
    EXPECT_FALSE(r->Header("x-request-id").empty());
    ids.push_back(r->Header("x-request-id"));
    const json error = json::parse(r->body)["error"];
    EXPECT_EQ(error["code"], 404);
    EXPECT_EQ(error["type"], "invalid_request_error");
    EXPECT_EQ(error["message"].get<std::string>().rfind("no route for GET /", 0), 0u);
  }
  EXPECT_NE(ids[0], ids[1]);
  EXPECT_TRUE(JournalRows().empty());  // nothing above is a generation request
}

TEST_F(HttpDoorTest, EveryPlainResponseCarriesARequestIdAndEchoesTheClients) {
  Start();
  auto c = Connect();
  for (const std::string path : {"/health", "/ready", "/metrics", "/v1/models", "/nope"}) {
    c->Send(Get(path, "X-Request-Id: probe-" + path.substr(1) + "\r\n"));
    auto r = c->Read();
    ASSERT_TRUE(r) << path;
    EXPECT_FALSE(r->Header("x-request-id").empty()) << path;
    EXPECT_EQ(r->Header("x-client-request-id"), "probe-" + path.substr(1)) << path;
  }
}

TEST_F(HttpDoorTest, NonStreamingResponseCarriesIdAndMeasurementHeaders) {
  Start();
  auto c = Connect();
  c->Send(Post("/v1/completions", Completion(false), "X-Request-Id: client-7\r\n"));
  auto r = c->Read();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->Header("content-type"), "application/json");
  EXPECT_FALSE(r->Header("x-request-id").empty());
  EXPECT_FALSE(r->Header("x-narwhal-ttft-s").empty());
  EXPECT_FALSE(r->Header("x-narwhal-first-byte-s").empty());
  EXPECT_EQ(json::parse(r->body)["choices"][0]["text"], "hello world");
  // The connection carries the next request.
  c->Send(Post("/v1/completions", Completion(false)));
  auto again = c->Read();
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 200);
  EXPECT_NE(again->Header("x-request-id"), r->Header("x-request-id"));

  const std::vector<json> rows = JournalRows();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0]["rid"], r->Header("x-request-id"));
  EXPECT_EQ(rows[0]["client_rid"], "client-7");
  EXPECT_EQ(rows[0]["terminal"], "completed");
}

TEST_F(HttpDoorTest, StreamRelaysEventsThenDone) {
  Start();
  fake_.QueueDecode(
      nt::DecodeStep::Stream({nt::CompletionChunk(" a"), nt::CompletionChunk(" b", "stop")}));
  auto r = Exchange(Post("/v1/completions", Completion(true)));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->Header("content-type"), "text/event-stream");
  EXPECT_EQ(r->Header("cache-control"), "no-cache");
  EXPECT_EQ(r->Header("x-accel-buffering"), "no");
  EXPECT_FALSE(r->Header("x-request-id").empty());
  EXPECT_TRUE(r->chunked);
  EXPECT_EQ(r->Header("x-narwhal-ttft-s"), "");  // measurement headers: non-streaming only
  const std::vector<std::string> events = Events(r->body);
  ASSERT_EQ(events.size(), 3u) << r->body;
  EXPECT_EQ(events[0], nt::CompletionChunk(" a"));
  EXPECT_EQ(events[1], nt::CompletionChunk(" b", "stop"));
  EXPECT_EQ(events[2], "[DONE]");
  EXPECT_EQ(r->body.substr(r->body.size() - 14), "data: [DONE]\n\n");
}

TEST_F(HttpDoorTest, B16_CommittedStreamEndsWithOneTerminalErrorEvent) {
  Start();
  fake_.QueueDecode(nt::DecodeStep::FailAfter({nt::CompletionChunk(" a")}, nt::ReadTimeout()));
  auto r = Exchange(Post(
      "/v1/chat/completions",
      json{{"model", "m"}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"stream", true}}
          .dump()));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  const std::vector<std::string> events = Events(r->body);
  ASSERT_EQ(events.size(), 2u) << r->body;
  const json last = json::parse(events.back());
  EXPECT_EQ(last["error"]["code"], 504);
  EXPECT_EQ(last["error"]["type"], "decode");
  EXPECT_EQ(last["error"]["message"].get<std::string>().rfind("engine went silent", 0), 0u);
  EXPECT_EQ(r->body.find("[DONE]"), std::string::npos);
}

TEST_F(HttpDoorTest, FailureBeforeTheFirstTokenIsAnOrdinaryError) {
  Start();
  fake_.QueueDecode(nt::DecodeStep::Fail(nt::FirstTokenTimeout()));
  auto r = Exchange(Post("/v1/completions", Completion(true)));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 504);
  EXPECT_EQ(r->Header("content-type"), "application/json");
  EXPECT_FALSE(r->Header("x-request-id").empty());
  const json error = json::parse(r->body)["error"];
  EXPECT_EQ(error["code"], 504);
  EXPECT_EQ(error["message"].get<std::string>().rfind("no first token within", 0), 0u);
}

TEST_F(HttpDoorTest, FailedAnswerCarriesNoMeasurementHeaders) {
  Start();
  // The prefill completed (ttft_s is known), the decode failed.
  fake_.QueueDecode(nt::DecodeStep::Fail(nt::FirstTokenTimeout()));
  auto r = Exchange(Post("/v1/completions", Completion(false)));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 504) << r->body;
  EXPECT_FALSE(r->Header("x-request-id").empty());
  EXPECT_EQ(r->Header("x-narwhal-ttft-s"), "");
  EXPECT_EQ(r->Header("x-narwhal-first-byte-s"), "");
  const std::vector<json> rows = JournalRows();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_TRUE(rows[0]["ttft_s"].is_number()) << rows[0].dump();  // the row keeps it
}

TEST_F(HttpDoorTest, RefusedRequestsAreJournaled) {
  Start(FastOptions(), "sekret");
  auto r = Exchange(Post("/v1/completions", Completion(false)));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(json::parse(r->body)["error"]["type"], "authentication_error");
  const std::string auth = "Authorization: Bearer sekret\r\n";
  r = Exchange(Post("/v1/completions", "{not json", auth));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  r = Exchange(Post("/v1/completions", json{{"model", "other"}, {"prompt", "x"}}.dump(), auth));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  r = Exchange(Get("/v1/models"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  r = Exchange(Post("/v1/completions", Completion(false), auth));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);

  const std::vector<json> rows = JournalRows();
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0]["terminal"], "rejected");
  EXPECT_EQ(rows[0]["status"], 401);
  EXPECT_EQ(rows[1]["terminal"], "invalid");
  EXPECT_EQ(rows[1]["status"], 400);
  EXPECT_EQ(rows[2]["reason"], "model_not_found");
  EXPECT_EQ(rows[3]["terminal"], "completed");
}

TEST_F(HttpDoorTest, TrailerFieldsNeverJoinTheHeaders) {
  Start(FastOptions(), "sekret");
  const std::string body = Completion(false);
  char size[32];
  std::snprintf(size, sizeof size, "%zx", body.size());
  const std::string head =
      "POST /v1/completions HTTP/1.1\r\nHost: t\r\n"
      "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n";
  const std::string chunks = std::string(size) + "\r\n" + body + "\r\n0\r\n";
  // A credential in the trailer is not a credential.
  auto r = Exchange(head + "\r\n" + chunks + "Authorization: Bearer sekret\r\n\r\n");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401) << r->body;
  // Nor is a request id; the same request with the key in its head passes.
  r = Exchange(head + "Authorization: Bearer sekret\r\n\r\n" + chunks +
               "X-Request-Id: from-trailer\r\n\r\n");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  const std::vector<json> rows = JournalRows();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0]["status"], 401);
  EXPECT_TRUE(rows[1]["client_rid"].is_null()) << rows[1].dump();
}

TEST_F(HttpDoorTest, InflightLimitIs429WithRetryAfter) {
  settings_.serving.max_inflight = 1;
  Start();
  fake_.QueueDecode(nt::DecodeStep::BlockAfter({}));
  auto held = Connect();
  held->Send(Post("/v1/completions", Completion(true)));
  ASSERT_TRUE(fake_.WaitForBlocked(1, 3000ms));
  auto r = Exchange(Post("/v1/completions", Completion(false)));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 429);
  EXPECT_EQ(r->Header("retry-after"), "1");
  EXPECT_EQ(json::parse(r->body)["error"]["type"], "rate_limit_error");
  held->Close();
  ASSERT_TRUE(WaitIdle());
  const std::vector<json> rows = JournalRows();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0]["terminal"], "rejected");
  EXPECT_EQ(rows[0]["rid"], r->Header("x-request-id"));
}

TEST_F(HttpDoorTest, B19_ClientGoneWhileHeldCancelsItsRequest) {
  Start();
  fake_.QueueDecode(nt::DecodeStep::BlockAfter({}));
  auto c = Connect();
  c->Send(Post("/v1/completions", Completion(true)));
  ASSERT_TRUE(fake_.WaitForBlocked(1, 3000ms));
  c->Close();
  ASSERT_TRUE(WaitIdle());
  ASSERT_EQ(fake_.decode_calls().size(), 1u);
  EXPECT_TRUE(fake_.decode_calls()[0].saw_cancel);
  const std::vector<json> rows = JournalRows();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0]["terminal"], "cancelled");
}

TEST_F(HttpDoorTest, B19_ClientGoneMidStreamCancelsItsRequest) {
  Start();
  fake_.QueueDecode(nt::DecodeStep::BlockAfter({nt::CompletionChunk(" a")}));
  auto c = Connect();
  c->Send(Post("/v1/completions", Completion(true)));
  auto head = c->Read(3000ms, /*head_only=*/true);
  ASSERT_TRUE(head);
  EXPECT_EQ(head->status, 200);
  ASSERT_TRUE(fake_.WaitForBlocked(1, 3000ms));
  c->Reset();
  ASSERT_TRUE(WaitIdle());
  EXPECT_TRUE(fake_.decode_calls()[0].saw_cancel);
  const std::vector<json> rows = JournalRows();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0]["terminal"], "cancelled");
}

// The door on the fake clock: every bound of a connection and every
// request deadline comes due only when the test advances the clock.
class HttpDoorFakeClockTest : public HttpDoorTest {
 protected:
  HttpDoorFakeClockTest() { door_clock_ = &fake_clock_; }

  // Waits (real time, bounded) until the timers waiting on the clock are due
  // at exactly `deadlines` (earliest first).
  bool WaitPendingDeadlines(const std::vector<engines::MonoTime>& deadlines) {
    const auto until = SteadyClock::now() + 3000ms;
    while (fake_clock_.pending_deadlines() != deadlines) {
      if (SteadyClock::now() > until) return false;
      std::this_thread::sleep_for(2ms);
    }
    return true;
  }

  nt::FakeClock fake_clock_;  // a member of this fixture: it outlives TearDown
};

// The write to a client that stops reading waits for it until the request
// deadline on the clock, and no longer: 1 ms short of it the connection's
// one bound waits for exactly the deadline (nothing earlier is due, however
// long real time runs) and the stream still runs; at it the stream is cut.
TEST_F(HttpDoorFakeClockTest, StreamToAClientThatStopsReadingEndsAtTheRequestDeadline) {
  settings_.serving.request_timeout_s = 1;
  Start();
  // Far more than the socket buffers hold.
  fake_.QueueDecode(nt::DecodeStep::Stream(
      std::vector<std::string>(3000, nt::CompletionChunk(std::string(8000, 'x')))));
  const engines::MonoTime deadline = fake_clock_.Now() + 1s;
  auto c = Connect();
  c->Send(Post("/v1/completions", Completion(true)));
  // The head comes with the first token: the stream's writes have begun.
  // From here on the client reads nothing.
  auto head = c->Read(3000ms, /*head_only=*/true);
  ASSERT_TRUE(head);
  EXPECT_EQ(head->status, 200);
  fake_clock_.Advance(999ms);
  EXPECT_TRUE(WaitPendingDeadlines({deadline}));
  EXPECT_FALSE(WaitIdle(0ms));  // the write waits for the client
  EXPECT_EQ(shim_->open_connections(), 1);
  fake_clock_.Advance(1ms);
  ASSERT_TRUE(WaitIdle(3000ms));
  EXPECT_TRUE(c->WaitClosed(5000ms));
  const std::vector<json> rows = JournalRows();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_NE(rows[0]["terminal"], "completed");
}

TEST_F(HttpDoorTest, Http10StreamIsUnframedAndEndsWithTheConnection) {
  Start();
  auto c = Connect();
  c->Send(Post("/v1/completions", Completion(true), "", "1.0"));
  auto r = c->Read();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->version, 10u);
  EXPECT_FALSE(r->chunked);
  const std::vector<std::string> events = Events(r->body);
  ASSERT_EQ(events.size(), 3u) << r->body;
  EXPECT_EQ(events.back(), "[DONE]");
  EXPECT_TRUE(c->WaitClosed(1000ms));
}

TEST_F(HttpDoorTest, ExpectContinueGetsAnInterimResponseBeforeTheBody) {
  Start();
  const std::string body = Completion(false);
  auto c = Connect();
  c->Send("POST /v1/completions HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: " +
          std::to_string(body.size()) + "\r\n\r\n");
  auto interim = c->Read(2000ms);
  ASSERT_TRUE(interim);
  EXPECT_EQ(interim->status, 100);
  c->Send(body);
  auto r = c->Read();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

// ---------------------------------------------------------------------------
// Under abuse.

TEST_F(HttpDoorTest, HeadTrickledByteByByteIsCutAtTheHeaderTimeout) {
  Start();
  auto c = Connect();
  const std::string head = "GET /health HTTP/1.1\r\nX-Slow: " + std::string(4000, 'a');
  const auto started = SteadyClock::now();
  bool closed = false;
  // Faster than any per-read timeout would notice, slower than the bound.
  for (size_t i = 0; i < head.size() && SteadyClock::now() - started < 5s; ++i) {
    if (!c->Send(head.substr(i, 1)) || c->WaitClosed(20ms)) {
      closed = true;
      break;
    }
  }
  const auto elapsed = SteadyClock::now() - started;
  EXPECT_TRUE(closed);
  EXPECT_GE(elapsed, 250ms);
  EXPECT_LT(elapsed, 2s);
}

TEST_F(HttpDoorTest, SilentConnectionIsClosedAtTheHeaderTimeout) {
  Start();
  auto c = Connect();
  const auto started = SteadyClock::now();
  EXPECT_TRUE(c->WaitClosed(3000ms));
  EXPECT_LT(SteadyClock::now() - started, 2s);
  EXPECT_TRUE(WaitOpenConnections(0));
}

TEST_F(HttpDoorTest, StalledBodyIsCutAfterTheHeaderTimeoutOfSilence) {
  Start();
  auto c = Connect();
  c->Send("POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n{\"model\"");
  const auto started = SteadyClock::now();
  EXPECT_TRUE(c->WaitClosed(3000ms));
  EXPECT_GE(SteadyClock::now() - started, 250ms);
  EXPECT_TRUE(c->pending().empty());  // closed without an answer
  EXPECT_TRUE(JournalRows().empty());
}

TEST_F(HttpDoorTest, IdleKeepAliveConnectionIsClosed) {
  HttpDoorOptions options = FastOptions();
  options.keepalive_timeout = 400ms;
  Start(options);
  auto c = Connect();
  c->Send(Get("/health"));
  ASSERT_TRUE(c->Read());
  const auto started = SteadyClock::now();
  EXPECT_TRUE(c->WaitClosed(3000ms));
  EXPECT_GE(SteadyClock::now() - started, 300ms);
}

TEST_F(HttpDoorTest, HealthAnswersPromptlyWhile200SlowHeadConnectionsAreOpen) {
  HttpDoorOptions options = FastOptions();
  options.header_timeout = 30s;  // they stay for the whole test
  Start(options);
  std::vector<std::unique_ptr<RawHttpClient>> slow;
  for (int i = 0; i < 200; ++i) {
    slow.push_back(Connect());
    slow.back()->Send("GET /health HTTP/1.1\r\nHost: t\r\nX-Slow: a");
  }
  ASSERT_TRUE(WaitOpenConnections(200));
  const auto started = SteadyClock::now();
  auto r = Exchange(Get("/health"));
  const auto elapsed = SteadyClock::now() - started;
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_LT(elapsed, 500ms);
  EXPECT_GE(shim_->open_connections(), 200);
}

TEST_F(HttpDoorTest, PipelinedRequestsAreAnsweredInOrder) {
  Start();
  auto c = Connect();
  c->Send(Get("/health") + Post("/v1/completions", Completion(false)) + Get("/nope") +
          Post("/v1/completions", Completion(true)) + Get("/ready"));
  const int expected[] = {200, 200, 404, 200, 200};
  std::vector<RawResponse> responses;
  for (int status : expected) {
    auto r = c->Read();
    ASSERT_TRUE(r) << "response " << responses.size() << " missing";
    EXPECT_EQ(r->status, status);
    responses.push_back(*r);
  }
  EXPECT_EQ(json::parse(responses[0].body)["status"], "ok");
  EXPECT_EQ(json::parse(responses[1].body)["object"], "text_completion");
  EXPECT_EQ(Events(responses[3].body).back(), "[DONE]");
  EXPECT_EQ(json::parse(responses[4].body)["status"], "ready");
  EXPECT_EQ(JournalRows().size(), 2u);
}

TEST_F(HttpDoorTest, ChunkedBodyOverTheLimitIsRefusedWhileItArrives) {
  Start();  // max_body_bytes: 64 KiB
  auto c = Connect();
  c->Send("POST /v1/completions HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n");
  const std::string chunk = "2000\r\n" + std::string(8192, 'a') + "\r\n";
  size_t sent = 0;
  // Meant as 1 GiB; the door must answer long before.
  while (sent < (1u << 30) && c->TrySend(chunk)) {
    sent += chunk.size();
    if (sent > (2u << 20)) break;
  }
  auto r = c->Read(3000ms);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);
  EXPECT_EQ(json::parse(r->body)["error"]["message"].get<std::string>().rfind(
                "request body exceeds serving.max_request_bytes (65536 bytes)", 0),
            0u);
  EXPECT_FALSE(r->keep_alive);
  const std::vector<json> rows = JournalRows();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0]["terminal"], "invalid");
  EXPECT_EQ(rows[0]["status"], 413);
  EXPECT_EQ(rows[0]["rid"], r->Header("x-request-id"));
}

TEST_F(HttpDoorTest, ContentLengthOverTheLimitIsRefusedBeforeTheBody) {
  Start();
  auto c = Connect();
  c->Send("POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\nContent-Length: 1073741824\r\n\r\n");
  auto r = c->Read(2000ms);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);
  EXPECT_TRUE(c->WaitClosed(2000ms));
  ASSERT_EQ(JournalRows().size(), 1u);
  EXPECT_EQ(JournalRows()[0]["api"], "chat");
}

TEST_F(HttpDoorTest, TooManyHeaderFieldsAre431) {
  Start();  // max_headers: 20
  std::string fields;
  for (int i = 0; i < 21; ++i) fields += "X-F" + std::to_string(i) + ": v\r\n";
  auto r = Exchange(Post("/v1/completions", Completion(false), fields));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 431);
  EXPECT_NE(r->body.find("serving.max_headers (20)"), std::string::npos) << r->body;
  const std::vector<json> rows = JournalRows();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0]["terminal"], "invalid");
  EXPECT_EQ(rows[0]["status"], 431);
  EXPECT_EQ(rows[0]["reason"], "headers_too_large");
  // Twenty are fine (with Host, Content-Type and Content-Length).
  fields.clear();
  for (int i = 0; i < 17; ++i) fields += "X-F" + std::to_string(i) + ": v\r\n";
  r = Exchange(Post("/v1/completions", Completion(false), fields));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

TEST_F(HttpDoorTest, OversizedHeaderBlockIs431) {
  Start();  // max_header_bytes: 8192
  auto r = Exchange(Get("/health", "X-Big: " + std::string(9000, 'b') + "\r\n"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 431);
  EXPECT_NE(r->body.find("serving.max_header_bytes (8192 bytes)"), std::string::npos);
  // Fields adding up to more than the limit, too.
  std::string fields;
  for (int i = 0; i < 15; ++i) {
    fields += "X-F" + std::to_string(i) + ": " + std::string(700, 'v') + "\r\n";
  }
  r = Exchange(Get("/health", fields));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 431);
}

TEST_F(HttpDoorTest, EndlessHeaderStreamIsRefusedEarly) {
  Start();
  auto c = Connect();
  c->Send("GET /health HTTP/1.1\r\nHost: t\r\n");
  std::string lines;
  for (int i = 0; i < 100; ++i) lines += "X-A: b\r\n";
  // Meant as a million fields; the door answers after the 21st.
  for (int i = 0; i < 10000 && c->TrySend(lines); ++i) {
  }
  auto r = c->Read(2000ms);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 431);
  EXPECT_TRUE(c->WaitClosed(2000ms));
}

TEST_F(HttpDoorTest, ContentLengthWithTransferEncodingIsRefusedAndClosed) {
  Start();
  const std::string smuggled = Get("/health");
  const std::string body = "5\r\nhello\r\n0\r\n\r\n";
  const std::string heads[] = {
      "Content-Length: " + std::to_string(body.size()) + "\r\nTransfer-Encoding: chunked\r\n",
      "Transfer-Encoding: chunked\r\nContent-Length: " + std::to_string(body.size()) + "\r\n",
      "Transfer-Encoding: gzip\r\nContent-Length: " + std::to_string(body.size()) + "\r\n",
  };
  for (const std::string& framing : heads) {
    auto c = Connect();
    c->Send("POST /v1/completions HTTP/1.1\r\nHost: t\r\n" + framing + "\r\n" + body + smuggled);
    auto r = c->Read(2000ms);
    ASSERT_TRUE(r) << framing;
    EXPECT_EQ(r->status, 400) << framing;
    EXPECT_NE(r->body.find("Content-Length and Transfer-Encoding"), std::string::npos) << r->body;
    EXPECT_FALSE(r->keep_alive);
    EXPECT_TRUE(c->WaitClosed(2000ms));
    EXPECT_EQ(c->pending().find("HTTP/1.1 200"), std::string::npos) << "smuggled request answered";
  }
  const std::vector<json> rows = JournalRows();
  ASSERT_EQ(rows.size(), 3u);
  for (const json& row : rows) {
    EXPECT_EQ(row["terminal"], "invalid");
    EXPECT_EQ(row["status"], 400);
  }
}

TEST_F(HttpDoorTest, TransferCodingOtherThanChunkedIsRefused) {
  Start();
  auto r = Exchange("POST /v1/completions HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip\r\n\r\n" +
                    Get("/health"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
}

TEST_F(HttpDoorTest, MalformedRequestLineIs400) {
  Start();
  auto c = Connect();
  c->Send("NOT HTTP AT ALL\r\n\r\n");
  auto r = c->Read(2000ms);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(json::parse(r->body)["error"]["code"], 400);
  EXPECT_TRUE(c->WaitClosed(2000ms));
  EXPECT_TRUE(JournalRows().empty());  // never became a request
}

TEST_F(HttpDoorTest, ConnectionsBeyondTheCapAreRefusedAtOnce) {
  HttpDoorOptions options = FastOptions();
  options.max_connections = 3;
  options.reserve_connections = 0;  // the probe reserve: http_door_capacity_test
  options.header_timeout = 30s;
  Start(options);
  std::vector<std::unique_ptr<RawHttpClient>> held;
  for (int i = 0; i < 3; ++i) held.push_back(Connect());
  ASSERT_TRUE(WaitOpenConnections(3));
  auto extra = Connect();
  const auto started = SteadyClock::now();
  EXPECT_TRUE(extra->WaitClosed(2000ms));
  EXPECT_LT(SteadyClock::now() - started, 1s);
  if (!extra->pending().empty()) {
    EXPECT_EQ(extra->pending().rfind("HTTP/1.1 503", 0), 0u) << extra->pending();
  }
  // A slot that frees up is usable again.
  held[0]->Close();
  ASSERT_TRUE(WaitOpenConnections(2));
  auto r = Exchange(Get("/health"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

// ---------------------------------------------------------------------------
// Graceful shutdown.

TEST_F(HttpDoorTest, DrainThenStopCutsOpenStreamsAndCancelsThem) {
  Start();
  fake_.QueueDecode(nt::DecodeStep::BlockAfter({nt::CompletionChunk(" a")}));
  auto streaming = Connect();
  streaming->Send(Post("/v1/completions", Completion(true)));
  auto head = streaming->Read(3000ms, /*head_only=*/true);
  ASSERT_TRUE(head);
  ASSERT_TRUE(fake_.WaitForBlocked(1, 3000ms));

  shim_->BeginDrain();
  auto c = Connect();
  c->Send(Get("/ready"));
  auto ready = c->Read();
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, 503);
  EXPECT_EQ(json::parse(ready->body)["reason"], "shutting down");
  EXPECT_FALSE(ready->keep_alive);
  EXPECT_TRUE(c->WaitClosed(2000ms));

  EXPECT_FALSE(shim_->WaitIdle(SteadyClock::now() + 100ms));  // the stream still runs
  shim_->StopAccepting();
  EXPECT_TRUE(streaming->WaitClosed(2000ms));
  EXPECT_TRUE(WaitIdle());
  shim_->Join();
  EXPECT_EQ(shim_->open_connections(), 0);
  EXPECT_TRUE(fake_.decode_calls()[0].saw_cancel);
  RawHttpClient late(port_);
  EXPECT_FALSE(late.connected() && late.Send(Get("/health")) && late.Read(500ms));
}

}  // namespace
}  // namespace narwhal::server::http_door_test
