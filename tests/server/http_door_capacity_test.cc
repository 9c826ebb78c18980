// The HTTP door at its connection cap, on loopback: connections that hold
// every slot with slow bodies cannot starve GET /health, /ready and
// /metrics (the reserve beyond serving.max_connections), the reserve is
// bounded in size and in time, and a body that trickles in is cut at its
// pace bound rather than at serving.request_timeout_s.
#include <memory>
#include <string>
#include <vector>

#include "tests/server/http_door_harness.h"

namespace narwhal::server::http_door_test {
namespace {

// A generation request whose body never arrives whole: it holds its slot.
std::string SlowBodyHead() {
  return "POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
         "Content-Length: 10000\r\n\r\n{\"model\"";
}

// Every slot held by a slow body (the silence bound far away): probes and
// scrapes still get their answers, on the reserve, promptly.
TEST_F(HttpDoorTest, HealthReadyAndMetricsAnswerWhileSlowBodiesHoldEverySlot) {
  HttpDoorOptions options = FastOptions();
  options.max_connections = 3;
  options.header_timeout = 30s;
  Start(options);
  std::vector<std::unique_ptr<RawHttpClient>> held;
  for (int i = 0; i < 3; ++i) {
    held.push_back(Connect());
    held.back()->Send(SlowBodyHead());
  }
  ASSERT_TRUE(WaitOpenConnections(3));
  for (const char* path : {"/health", "/ready", "/metrics"}) {
    SCOPED_TRACE(path);
    const auto started = SteadyClock::now();
    auto r = Exchange(Get(path));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
    EXPECT_FALSE(r->keep_alive);
    EXPECT_LT(SteadyClock::now() - started, 1s);
  }
  EXPECT_EQ(shim_->open_connections(), 3);  // the reserve is not in the count
}

// On the reserve only probes are served: anything else gets the fixed
// at-capacity 503, is closed, and is no request (no journal row).
TEST_F(HttpDoorTest, ReserveConnectionAnswersOtherRequestsWithTheCapacity503) {
  HttpDoorOptions options = FastOptions();
  options.max_connections = 2;
  options.header_timeout = 30s;
  Start(options);
  std::vector<std::unique_ptr<RawHttpClient>> held;
  for (int i = 0; i < 2; ++i) {
    held.push_back(Connect());
    held.back()->Send(SlowBodyHead());
  }
  ASSERT_TRUE(WaitOpenConnections(2));
  for (const std::string& request :
       {Post("/v1/completions", Completion(false)), Get("/v1/models"),
        std::string("GET /health HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nabc"),
        std::string("DELETE /health HTTP/1.1\r\nHost: t\r\n\r\n")}) {
    SCOPED_TRACE(request.substr(0, 40));
    auto c = Connect();
    c->Send(request);
    auto r = c->Read(2000ms);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 503);
    EXPECT_NE(r->body.find("too many open connections (serving.max_connections = 2)"),
              std::string::npos)
        << r->body;
    EXPECT_TRUE(c->WaitClosed(2000ms));
  }
  EXPECT_TRUE(JournalRows().empty());
  EXPECT_TRUE(fake_.prefill_calls().empty());
}

// The reserve holds reserve_connections at most, each for reserve_timeout:
// one more is refused at once, and idle reserve connections are closed
// unanswered at their bound, which frees the reserve for the next probe.
TEST_F(HttpDoorTest, ReserveIsBoundedInSizeAndTime) {
  HttpDoorOptions options = FastOptions();
  options.max_connections = 1;
  options.header_timeout = 30s;
  options.reserve_connections = 2;
  options.reserve_timeout = 400ms;
  Start(options);
  auto held = Connect();
  held->Send(SlowBodyHead());
  ASSERT_TRUE(WaitOpenConnections(1));
  auto idle1 = Connect();
  auto idle2 = Connect();
  const auto started = SteadyClock::now();
  // Beyond the cap and the reserve: refused at once.
  auto extra = Connect();
  EXPECT_TRUE(extra->WaitClosed(2000ms));
  EXPECT_LT(SteadyClock::now() - started, 300ms);
  if (!extra->pending().empty()) {
    EXPECT_EQ(extra->pending().rfind("HTTP/1.1 503", 0), 0u) << extra->pending();
  }
  // Silent reserve connections are closed at their bound, unanswered.
  EXPECT_TRUE(idle1->WaitClosed(3000ms));
  EXPECT_TRUE(idle2->WaitClosed(3000ms));
  EXPECT_GE(SteadyClock::now() - started, 300ms);
  EXPECT_TRUE(idle1->pending().empty());
  auto r = Exchange(Get("/health"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

// A body that keeps sending — never silent for the header timeout — but
// slower than min_body_bytes_per_s is cut at header_timeout plus its
// allowance, not at serving.request_timeout_s.
TEST_F(HttpDoorTest, BodyTrickledSlowerThanTheMinimumRateIsCut) {
  HttpDoorOptions options = FastOptions();  // header_timeout 300 ms
  options.min_body_bytes_per_s = 1000;
  options.body_timeout = 60s;
  Start(options);
  auto c = Connect();
  ASSERT_TRUE(c->Send("POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Length: 60000\r\n\r\n"));
  const auto started = SteadyClock::now();
  bool closed = false;
  // 10 bytes every 100 ms: 100 bytes/s, a tenth of the minimum.
  while (!closed && SteadyClock::now() - started < 5s) {
    closed = !c->Send(std::string(10, ' ')) || c->WaitClosed(100ms);
  }
  const auto elapsed = SteadyClock::now() - started;
  EXPECT_TRUE(closed);
  EXPECT_GE(elapsed, 300ms);
  EXPECT_LT(elapsed, 2s);
  EXPECT_TRUE(JournalRows().empty());
}

// A body at a decent pace, longer in all than the header timeout, is read
// to its end and served.
TEST_F(HttpDoorTest, BodyAtTheMinimumRateOrFasterIsServed) {
  HttpDoorOptions options = FastOptions();  // header_timeout 300 ms
  options.min_body_bytes_per_s = 1000;
  Start(options);
  fake_.QueuePrefill(nt::PrefillStep::Ok());
  fake_.QueueDecode(nt::DecodeStep::Stream({nt::CompletionChunk(" a", "stop")}));
  const std::string body =
      json{{"model", "m"}, {"prompt", std::string(1500, 'p')}, {"max_tokens", 4}}.dump();
  auto c = Connect();
  ASSERT_TRUE(c->Send("POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: "
                      "application/json\r\nContent-Length: " +
                      std::to_string(body.size()) + "\r\n\r\n"));
  const auto started = SteadyClock::now();
  // 250 bytes every 100 ms: 2500 bytes/s, over 600 ms in all.
  for (size_t at = 0; at < body.size(); at += 250) {
    ASSERT_TRUE(c->Send(body.substr(at, 250)));
    std::this_thread::sleep_for(100ms);
  }
  auto r = c->Read(3000ms);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_GE(SteadyClock::now() - started, 500ms);
}

}  // namespace
}  // namespace narwhal::server::http_door_test
