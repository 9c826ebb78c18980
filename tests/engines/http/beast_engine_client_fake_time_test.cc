// BeastEngineClient's timing rules (B12, B13, the prefill bound, the request
// deadline, B19) on fake time, without sleeping.
//
// The adapter runs on its own event loop with a FakeClock; its engine is a
// scripted HTTP/1.1 server on loopback, in this process (Beast's parser and
// serializer), that each test drives step by step: hold or send the response
// headers, send an SSE chunk carrying a token or only metadata, send [DONE],
// stay silent. Each step is: engine step -> wait (bounded in real time) until
// the adapter observed it -> let the adapter's loop settle -> advance fake
// time -> check whether the leg failed. Nothing here waits on the real clock
// except the safety bounds, which only a broken adapter reaches.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "engines/api.h"
#include "engines/cancel_token.h"
#include "engines/engine_client.h"
#include "engines/engine_failure.h"
#include "engines/http/beast_engine_client.h"
#include "engines/http/http_options.h"
#include "engines/http/io_loops.h"
#include "engines/prefill_result.h"
#include "engines/stream_event.h"
#include "tests/fakes/edge_status.h"
#include "tests/fakes/fake_clock.h"

namespace narwhal::engines {

// Readable gtest messages for the failure enums (found by ADL).
void PrintTo(Phase p, std::ostream* os) { *os << PhaseName(p); }
void PrintTo(FailureReason r, std::ostream* os) { *os << FailureReasonName(r); }
void PrintTo(BreakerClass c, std::ostream* os) { *os << BreakerClassName(c); }
void PrintTo(EventKind k, std::ostream* os) { *os << EventKindName(k); }

namespace {

namespace nt = ::narwhal::testing;

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using json = nlohmann::json;
using ::narwhal::testing::FakeClock;
using namespace std::chrono_literals;

// Real-time bound on every wait; only a broken adapter (or test) reaches it.
constexpr auto kSafety = std::chrono::seconds(5);

constexpr double kFirstTokenS = 2;  // B12 budget
constexpr double kReadS = 1;        // B13 read timeout
constexpr auto kFirstToken = std::chrono::seconds(2);
constexpr auto kRead = std::chrono::seconds(1);
constexpr auto kTick = std::chrono::milliseconds(1);  // "just below" a bound

// SSE payloads. Metadata-only chunks (engines/stream_event.h): a role-only
// delta, an empty-text delta, a usage-only chunk.
const char kRoleOnly[] =
    R"({"id":"c1","object":"chat.completion.chunk",)"
    R"("choices":[{"index":0,"delta":{"role":"assistant"},"finish_reason":null}]})";
const char kEmptyText[] =
    R"({"id":"c1","object":"chat.completion.chunk",)"
    R"("choices":[{"index":0,"delta":{"content":""},"finish_reason":null}]})";
const char kUsageOnly[] =
    R"({"id":"c1","object":"chat.completion.chunk","choices":[],)"
    R"("usage":{"prompt_tokens":7,"completion_tokens":0,"total_tokens":7}})";

std::string TokenEvent(const std::string& text) {
  return json{{"id", "c1"},
              {"object", "chat.completion.chunk"},
              {"choices", json::array({json{{"index", 0},
                                            {"delta", json{{"content", text}}},
                                            {"finish_reason", nullptr}}})}}
      .dump();
}

// A loopback engine whose every response step the test calls. Its socket
// operations run on the test thread: accepting and reading the request on a
// private io_context run until done (bounded), response writes synchronously
// (small, to a loopback peer that is reading).
class ScriptedEngine {
 public:
  ScriptedEngine() : acceptor_(io_, tcp::endpoint(asio::ip::address_v4::loopback(), 0)) {}

  std::string url() const {
    return "http://127.0.0.1:" + std::to_string(acceptor_.local_endpoint().port());
  }

  // Waits for the adapter to connect and send its whole request.
  bool AcceptRequest() {
    bool done = false;
    beast::error_code result;
    acceptor_.async_accept([&](beast::error_code ec, tcp::socket s) {
      if (ec) {
        result = ec;
        done = true;
        return;
      }
      socket_.emplace(std::move(s));
      fd_ = socket_->native_handle();
      http::async_read(*socket_, buffer_, request_, [&](beast::error_code ec2, size_t) {
        result = ec2;
        done = true;
      });
    });
    if (!RunUntil([&] { return done; })) {
      ADD_FAILURE() << "the adapter's request never reached the engine";
      return false;
    }
    EXPECT_FALSE(result) << result.message();
    return !result;
  }

  const http::request<http::string_body>& request() const { return request_; }

  // Response headers of a chunked stream (the connection is not kept alive,
  // so nothing is pooled across tests).
  void SendHeaders(std::string_view content_type = "text/event-stream") {
    http::response<http::empty_body> res{http::status::ok, 11};
    res.set(http::field::content_type, content_type);
    res.keep_alive(false);
    res.chunked(true);
    http::response_serializer<http::empty_body> serializer{res};
    beast::error_code ec;
    http::write_header(*socket_, serializer, ec);
    EXPECT_FALSE(ec) << ec.message();
  }

  // One SSE event (`data: <payload>`) in one HTTP chunk.
  void SendEvent(std::string_view payload) {
    SendChunk("data: " + std::string(payload) + "\n\n");
  }
  // An SSE comment (a keep-alive) in one HTTP chunk.
  void SendComment() { SendChunk(": keep-alive\n\n"); }
  // Raw SSE bytes (part of an event, say) in one HTTP chunk.
  void SendSse(const std::string& bytes) { SendChunk(bytes); }
  // `data: [DONE]` and the end of the chunked body.
  void SendDone() {
    SendChunk("data: [DONE]\n\n");
    beast::error_code ec;
    asio::write(*socket_, http::make_chunk_last(), ec);
    EXPECT_FALSE(ec) << ec.message();
  }

  // True when the adapter has closed its end (EOF or reset is readable).
  // Never blocks; callable from any thread.
  bool PeerClosed() const {
    if (fd_ < 0) return false;
    char byte;
    const ssize_t n = ::recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
  }

  // Waits (bounded) until the adapter has closed its end.
  bool WaitForClose() {
    const auto until = std::chrono::steady_clock::now() + kSafety;
    while (!PeerClosed()) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          until - std::chrono::steady_clock::now());
      if (left <= 0ms) return false;
      pollfd pfd{fd_, POLLIN | POLLRDHUP, 0};
      ::poll(&pfd, 1, static_cast<int>(left.count()));
    }
    return true;
  }

  void Close() {
    beast::error_code ignored;
    fd_ = -1;
    if (socket_) socket_->close(ignored);
    acceptor_.close(ignored);
  }

 private:
  void SendChunk(const std::string& bytes) {
    beast::error_code ec;
    asio::write(*socket_, http::make_chunk(asio::buffer(bytes)), ec);
    EXPECT_FALSE(ec) << ec.message();
  }

  // Runs the private io_context until `done()` or the safety bound.
  bool RunUntil(const std::function<bool()>& done) {
    const auto until = std::chrono::steady_clock::now() + kSafety;
    io_.restart();
    while (!done() && std::chrono::steady_clock::now() < until) {
      if (io_.run_one_for(10ms) == 0 && io_.stopped()) break;  // out of work
    }
    return done();
  }

  asio::io_context io_;
  tcp::acceptor acceptor_;
  std::optional<tcp::socket> socket_;
  std::atomic<int> fd_{-1};  // socket_'s descriptor, for checks from any thread
  beast::flat_buffer buffer_;
  http::request<http::string_body> request_;
};

// The client side of the decode leg: records events and flushes, and can
// hold a Flush (a client back-pressuring the stream) until released.
// OnEvent/Flush run on the adapter's loop; the test thread waits on them.
class Observer : public DecodeObserver {
 public:
  bool OnEvent(std::string_view, const StreamEvent& event) override {
    std::lock_guard<std::mutex> lock(mu_);
    kinds_.push_back(event.kind);
    tokens_ += event.tokens;
    cv_.notify_all();
    return true;
  }

  Awaitable<bool> Flush() override {
    bool hold = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++flushes_;
      hold = hold_ && tokens_ > 0;
      cv_.notify_all();
    }
    if (hold) {
      // A wait with no expiry that only Release() ends: an event, not a sleep.
      asio::steady_timer gate(co_await asio::this_coro::executor,
                              asio::steady_timer::time_point::max());
      {
        std::lock_guard<std::mutex> lock(mu_);
        gate_ = &gate;
        held_ = true;
        cv_.notify_all();
      }
      beast::error_code ec;
      co_await gate.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      std::lock_guard<std::mutex> lock(mu_);
      gate_ = nullptr;
      held_ = false;
      cv_.notify_all();
    }
    co_return true;
  }

  // From now on, a Flush after the first token blocks until Release().
  void HoldFlushes() {
    std::lock_guard<std::mutex> lock(mu_);
    hold_ = true;
  }
  // Lets the held Flush complete (and no later one blocks).
  void Release(const Executor& loop) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      hold_ = false;
    }
    asio::post(loop, [this] {
      std::lock_guard<std::mutex> lock(mu_);
      if (gate_ != nullptr) gate_->cancel();
    });
  }

  bool WaitForEvents(size_t n) {
    return Wait([&] { return kinds_.size() >= n; });
  }
  bool WaitForFlushes(int n) {
    return Wait([&] { return flushes_ >= n; });
  }
  bool WaitHeld(bool held) {
    return Wait([&] { return held_ == held; });
  }

  int tokens() const {
    std::lock_guard<std::mutex> lock(mu_);
    return tokens_;
  }
  int flushes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return flushes_;
  }
  std::vector<EventKind> kinds() const {
    std::lock_guard<std::mutex> lock(mu_);
    return kinds_;
  }

 private:
  bool Wait(const std::function<bool()>& pred) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, kSafety, pred);
  }

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<EventKind> kinds_;
  int tokens_ = 0;
  int flushes_ = 0;
  bool hold_ = false;
  bool held_ = false;
  asio::steady_timer* gate_ = nullptr;  // loop thread only
};

class BeastEngineClientFakeTimeTest : public ::testing::Test {
 protected:
  static HttpEngineClientOptions Options() {
    HttpEngineClientOptions o;
    o.first_token_timeout_s = kFirstTokenS;
    o.decode_read_timeout_s = kReadS;
    o.connect_timeout_s = 10;
    return o;
  }

  void SetUp() override { StartClient(Options()); }

  void TearDown() override {
    // A leg a failed assertion left running ends when its client takes its
    // frames and its engine goes away (or, failing that, its cancel token
    // fires), before the loop is stopped.
    const bool running = (decode_.valid() && !Ready(decode_)) ||
                         (prefill_.valid() && !Ready(prefill_));
    if (running) {
      observer_.Release(loop());
      engine_.Close();
      if ((decode_.valid() && decode_.wait_for(kSafety) != std::future_status::ready) ||
          (prefill_.valid() && prefill_.wait_for(kSafety) != std::future_status::ready)) {
        cancel_.Cancel();
      }
    }
    Settle();
  }

  void StartClient(HttpEngineClientOptions options) {
    client_ = std::make_unique<BeastEngineClient>(std::move(options), clock_);
  }

  Executor loop() const { return loops_.executor(0); }

  // Leg options on fake time: a request deadline a minute away.
  LegOptions Leg(bool cancellable = false) {
    LegOptions o;
    o.backend_request_id = "rid-fake-time";
    o.request_deadline = clock_.Now() + 60s;
    o.cancel = cancellable ? &cancel_ : nullptr;
    return o;
  }

  void StartDecode(LegOptions leg) {
    auto promise = std::make_shared<std::promise<DecodeOutcome>>();
    decode_ = promise->get_future();
    const EngineTarget consumer{"d0", engine_.url()};
    asio::co_spawn(
        loop(),
        [this, consumer, leg, promise]() -> Awaitable<void> {
          promise->set_value(
              co_await client_->Decode(consumer, handoff_, body_, true, leg, observer_));
        },
        asio::detached);
  }

  void StartPrefill(LegOptions leg) {
    auto promise = std::make_shared<std::promise<PrefillOutcome>>();
    prefill_ = promise->get_future();
    const EngineTarget producer{"p0", engine_.url()};
    asio::co_spawn(
        loop(),
        [this, producer, leg, promise]() -> Awaitable<void> {
          promise->set_value(
              co_await client_->Prefill(producer, Api::kChatCompletions, body_, leg));
        },
        asio::detached);
  }

  // Starts a decode leg and lets the engine take its request.
  void StartDecodeAndAccept(LegOptions leg) {
    StartDecode(std::move(leg));
    ASSERT_TRUE(engine_.AcceptRequest());
    EXPECT_EQ(engine_.request().target(), "/v1/chat/completions");
    Settle();
  }

  // Sends one token and waits until the observer got it.
  void SendToken(const std::string& text = "Paris") {
    const size_t seen = observer_.kinds().size();
    engine_.SendEvent(TokenEvent(text));
    ASSERT_TRUE(observer_.WaitForEvents(seen + 1)) << "the token never reached the observer";
    ASSERT_EQ(observer_.kinds().back(), EventKind::kToken);
    Settle();
  }

  // Sends one metadata-only event and waits until the observer got it.
  void SendMetadata(std::string_view payload) {
    const size_t seen = observer_.kinds().size();
    engine_.SendEvent(payload);
    ASSERT_TRUE(observer_.WaitForEvents(seen + 1)) << "the metadata never reached the observer";
    ASSERT_EQ(observer_.kinds().back(), EventKind::kMetadata) << payload;
    Settle();
  }

  // Sends an SSE comment and waits until the adapter flushed the read that
  // carried it (a comment is no event for the observer).
  void SendComment() {
    const int flushed = observer_.flushes();
    engine_.SendComment();
    ASSERT_TRUE(observer_.WaitForFlushes(flushed + 1)) << "the comment was never read";
    Settle();
  }

  // Sends raw SSE bytes in one HTTP chunk and waits until the adapter flushed
  // the read that carried them.
  void SendSseBytes(const std::string& bytes) {
    const int flushed = observer_.flushes();
    engine_.SendSse(bytes);
    ASSERT_TRUE(observer_.WaitForFlushes(flushed + 1)) << "the bytes were never read";
    Settle();
  }

  // Runs the adapter's loop until what is queued on it now has run, and what
  // that queued too (a timer completion closing the socket, the read it
  // aborts, the end of the leg): then the leg waits on its next read with its
  // timer armed from the current fake time, or has ended.
  void Settle() {
    for (int i = 0; i < 4; ++i) {
      std::promise<void> done;
      std::future<void> f = done.get_future();
      asio::post(loop(), [&done] { done.set_value(); });
      ASSERT_EQ(f.wait_for(kSafety), std::future_status::ready) << "the adapter's loop is stuck";
    }
  }

  void Advance(MonoClock::duration d) {
    clock_.Advance(d);
    Settle();
  }

  template <typename T>
  static bool Ready(const std::future<T>& f) {
    return f.wait_for(0s) == std::future_status::ready;
  }

  // The leg is still running and its engine connection open.
  void ExpectAlive(const std::string& when) {
    Settle();
    if (decode_.valid()) {
      EXPECT_FALSE(Ready(decode_)) << "the decode leg ended " << when;
    }
    if (prefill_.valid()) {
      EXPECT_FALSE(Ready(prefill_)) << "the prefill leg ended " << when;
    }
    EXPECT_FALSE(engine_.PeerClosed()) << "the adapter closed the engine connection " << when;
  }

  // The leg's outcome, waited for within the safety bound; nullopt (and a
  // test failure) when the leg did not end.
  std::optional<DecodeOutcome> DecodeResult() {
    if (decode_.wait_for(kSafety) != std::future_status::ready) {
      ADD_FAILURE() << "the decode leg did not end";
      return std::nullopt;
    }
    return decode_.get();
  }
  // The leg's failure; nullopt (and a test failure) when it did not end or
  // succeeded.
  std::optional<EngineFailure> DecodeFailure() {
    std::optional<DecodeOutcome> out = DecodeResult();
    if (!out) return std::nullopt;
    EXPECT_FALSE(out->ok()) << "the decode leg was expected to fail";
    return out->failure;
  }
  std::optional<EngineFailure> PrefillFailure() {
    if (prefill_.wait_for(kSafety) != std::future_status::ready) {
      ADD_FAILURE() << "the prefill leg did not end";
      return std::nullopt;
    }
    PrefillOutcome out = prefill_.get();
    EXPECT_FALSE(out.ok()) << "the prefill leg was expected to fail";
    return out.failure;
  }
  // Succeeded: ended with generated output, then [DONE].
  void ExpectDecodeSucceeds() {
    std::optional<DecodeOutcome> out = DecodeResult();
    ASSERT_TRUE(out.has_value());
    EXPECT_TRUE(out->ok()) << out->failure->detail;
  }

  // Declaration order is teardown order reversed: the engine goes first, the
  // loop (and any coroutine frame it still holds) before what legs use.
  FakeClock clock_;
  CancelToken cancel_;
  Observer observer_;
  const json body_ = json::parse(R"({
    "model": "Qwen/Qwen3-0.6B",
    "messages": [{"role": "user", "content": "What is the capital of France?"}],
    "stream": true,
    "max_tokens": 64
  })");
  const PrefillResult handoff_{
      "p0", "http://127.0.0.1:1", Api::kChatCompletions, "rid-prefill", "NixlConnector",
      json::parse(R"({"remote_engine_id":"p0-engine","remote_block_ids":[1,2,3],
                      "remote_request_id":"rid-prefill-1a2b3c4d",
                      "remote_host":"127.0.0.1","remote_port":5600,
                      "do_remote_prefill":true,"do_remote_decode":false})")};
  std::unique_ptr<BeastEngineClient> client_;
  IoLoops loops_{1};
  ScriptedEngine engine_;
  std::future<DecodeOutcome> decode_;
  std::future<PrefillOutcome> prefill_;
};

void ExpectFirstTokenTimeout(const std::optional<EngineFailure>& failure,
                             const std::string& detail, BreakerClass cls) {
  ASSERT_TRUE(failure.has_value());
  const EngineFailure& f = *failure;
  EXPECT_EQ(f.phase, Phase::kDecode);
  EXPECT_EQ(nt::HttpStatus(f), 504);
  EXPECT_EQ(f.reason, FailureReason::kEngineTimeout);
  EXPECT_EQ(f.breaker_class, cls);
  EXPECT_EQ(f.evidence_iid, "d0");
  EXPECT_EQ(f.engine_status, 0);
  EXPECT_TRUE(f.transient);
  EXPECT_EQ(f.detail, detail);
}

void ExpectReadTimeout(const std::optional<EngineFailure>& failure) {
  ASSERT_TRUE(failure.has_value());
  const EngineFailure& f = *failure;
  EXPECT_EQ(f.phase, Phase::kDecode);
  EXPECT_EQ(nt::HttpStatus(f), 504);
  EXPECT_EQ(f.reason, FailureReason::kEngineTimeout);
  EXPECT_EQ(f.breaker_class, BreakerClass::kStream);
  EXPECT_EQ(f.evidence_iid, "d0");
  EXPECT_TRUE(f.transient);
  EXPECT_EQ(f.detail,
            "engine went silent between tokens: nothing arrived within the 1s read timeout");
}

void ExpectDeadline(const std::optional<EngineFailure>& failure, Phase phase) {
  ASSERT_TRUE(failure.has_value());
  const EngineFailure& f = *failure;
  EXPECT_EQ(f.phase, phase);
  EXPECT_EQ(nt::HttpStatus(f), 504);
  EXPECT_EQ(f.reason, FailureReason::kDeadline);
  EXPECT_EQ(f.breaker_class, BreakerClass::kNone);
  EXPECT_EQ(f.evidence_iid, "");
  EXPECT_FALSE(f.transient);
  EXPECT_EQ(f.detail, std::string("request deadline passed during the ") +
                          std::string(PhaseName(phase)) + " leg");
}

void ExpectCancelled(const std::optional<EngineFailure>& failure, Phase phase) {
  ASSERT_TRUE(failure.has_value());
  const EngineFailure& f = *failure;
  EXPECT_EQ(f.phase, phase);
  EXPECT_EQ(nt::HttpStatus(f), 499);
  EXPECT_EQ(f.reason, FailureReason::kCancelled);
  EXPECT_EQ(f.breaker_class, BreakerClass::kNone);
  EXPECT_EQ(f.evidence_iid, "");
  EXPECT_FALSE(f.transient);
  EXPECT_EQ(f.detail, "client went away");
}

// --- B12: the first-token budget -------------------------------------------------

// Headers come at once, then nothing: the leg lives through budget - 1 ms and
// fails exactly at the budget, closing the engine connection.
TEST_F(BeastEngineClientFakeTimeTest, B12_SilentEngineFailsExactlyAtTheBudget) {
  StartDecodeAndAccept(Leg());
  engine_.SendHeaders();
  Settle();
  Advance(kFirstToken - kTick);
  ExpectAlive("before its first-token budget was spent");
  Advance(kTick);
  ExpectFirstTokenTimeout(DecodeFailure(), "no first token within 2s: no frames at all",
                          BreakerClass::kStream);
  EXPECT_TRUE(engine_.WaitForClose());
  EXPECT_TRUE(observer_.kinds().empty());
}

// Metadata-only chunks (role-only delta, empty text, usage only, an SSE
// comment) keep arriving before any token: none of them restarts or stops the
// budget, which still ends 2 s after the leg started.
TEST_F(BeastEngineClientFakeTimeTest, B12_MetadataBeforeTheFirstTokenDoesNotExtendTheBudget) {
  StartDecodeAndAccept(Leg());
  engine_.SendHeaders();
  Settle();
  Advance(500ms);
  SendMetadata(kRoleOnly);
  Advance(500ms);
  SendMetadata(kEmptyText);
  Advance(500ms);
  SendComment();
  Advance(400ms);
  SendMetadata(kUsageOnly);
  // 1.9 s since the leg started, 0 s since the last chunk.
  Advance(100ms - kTick);
  ExpectAlive("before its first-token budget was spent");
  Advance(kTick);
  ExpectFirstTokenTimeout(DecodeFailure(),
                          "no first token within 2s: 3 metadata frame(s) but no token",
                          BreakerClass::kOverload);
  EXPECT_TRUE(engine_.WaitForClose());
  EXPECT_EQ(observer_.tokens(), 0);
}

// The engine holds its response headers for 1.5 s: that delay is spent from
// the budget, and the headers do not restart it.
TEST_F(BeastEngineClientFakeTimeTest, B12_DelayedResponseHeadersConsumeTheBudget) {
  StartDecodeAndAccept(Leg());
  Advance(1500ms);
  ExpectAlive("while its response headers were delayed within budget");
  engine_.SendHeaders();
  Settle();
  Advance(500ms - kTick);
  ExpectAlive("before its first-token budget was spent");
  Advance(kTick);
  ExpectFirstTokenTimeout(DecodeFailure(), "no first token within 2s: no frames at all",
                          BreakerClass::kStream);
  EXPECT_TRUE(engine_.WaitForClose());
}

// Bytes of an event that never ends, one every 300 ms from the headers on:
// they are no token, and the budget still ends 2 s after the leg started.
TEST_F(BeastEngineClientFakeTimeTest, B12_ByteDripBeforeTheFirstTokenDoesNotExtendTheBudget) {
  StartDecodeAndAccept(Leg());
  engine_.SendHeaders();
  Settle();
  const std::string partial = "data: " + TokenEvent("Paris");
  for (int i = 0; i < 6; ++i) {
    Advance(300ms);
    SendSseBytes(partial.substr(i, 1));
    ASSERT_FALSE(HasFailure()) << "at byte " << i;
  }
  Advance(200ms - kTick);  // 1.999 s since the leg started, 0.2 s since the last byte
  ExpectAlive("before its first-token budget was spent");
  Advance(kTick);
  ExpectFirstTokenTimeout(DecodeFailure(), "no first token within 2s: no frames at all",
                          BreakerClass::kStream);
  EXPECT_TRUE(engine_.WaitForClose());
  EXPECT_TRUE(observer_.kinds().empty());
}

// Headers that never come: the budget alone ends the leg.
TEST_F(BeastEngineClientFakeTimeTest, B12_HeadersThatNeverComeFailAtTheBudget) {
  StartDecodeAndAccept(Leg());
  Advance(kFirstToken - kTick);
  ExpectAlive("before its first-token budget was spent");
  Advance(kTick);
  ExpectFirstTokenTimeout(DecodeFailure(), "no first token within 2s: no frames at all",
                          BreakerClass::kStream);
  EXPECT_TRUE(engine_.WaitForClose());
}

// Headers delayed to just inside the budget, then a token: the leg succeeds.
TEST_F(BeastEngineClientFakeTimeTest, B12_HeaderDelayWithinTheBudgetThenATokenSucceeds) {
  StartDecodeAndAccept(Leg());
  Advance(kFirstToken - kTick);
  ExpectAlive("before its first-token budget was spent");
  engine_.SendHeaders();
  Settle();
  SendToken("Paris");
  ExpectAlive("after its first token");
  engine_.SendDone();
  ExpectDecodeSucceeds();
  EXPECT_EQ(observer_.tokens(), 1);
  EXPECT_TRUE(engine_.WaitForClose());  // the body ended; the connection is not kept
}

// --- B13: the read timeout after the first token ----------------------------------

// After the first token, silence lives through the read timeout - 1 ms and
// fails exactly at it.
TEST_F(BeastEngineClientFakeTimeTest, B13_SilenceAfterTheFirstTokenFailsAtTheReadTimeout) {
  StartDecodeAndAccept(Leg());
  engine_.SendHeaders();
  Advance(500ms);
  SendToken("Paris");
  Advance(kRead - kTick);
  ExpectAlive("before the read timeout passed");
  Advance(kTick);
  ExpectReadTimeout(DecodeFailure());
  EXPECT_TRUE(engine_.WaitForClose());
  EXPECT_EQ(observer_.tokens(), 1);
}

// Tokens each arriving just inside the read timeout keep the stream alive for
// far longer than the read timeout and the first-token budget together.
TEST_F(BeastEngineClientFakeTimeTest, B13_TokensJustInsideTheReadTimeoutNeverFail) {
  constexpr int kTokens = 25;
  StartDecodeAndAccept(Leg());
  engine_.SendHeaders();
  SendToken("t0");
  for (int i = 1; i < kTokens; ++i) {
    Advance(kRead - kTick);
    ExpectAlive("with every gap inside the read timeout (token " + std::to_string(i) + ")");
    SendToken("t" + std::to_string(i));
    ASSERT_FALSE(HasFailure()) << "at token " << i;
  }
  engine_.SendDone();
  ExpectDecodeSucceeds();
  EXPECT_EQ(observer_.tokens(), kTokens);
}

// Every chunk resets the read clock, metadata and SSE comments included; the
// timeout then counts from the last chunk.
TEST_F(BeastEngineClientFakeTimeTest, B13_MetadataChunksResetTheReadClock) {
  StartDecodeAndAccept(Leg());
  engine_.SendHeaders();
  SendToken("Paris");
  Advance(kRead - kTick);
  SendMetadata(kUsageOnly);
  Advance(kRead - kTick);
  ExpectAlive("within the read timeout of a usage-only chunk");
  SendMetadata(kEmptyText);
  Advance(kRead - kTick);
  ExpectAlive("within the read timeout of an empty-text chunk");
  SendComment();
  Advance(kRead - kTick);
  ExpectAlive("within the read timeout of an SSE comment");
  Advance(kTick);
  ExpectReadTimeout(DecodeFailure());
  EXPECT_EQ(observer_.tokens(), 1);
}

// After the first token the engine drips one byte of an event that never
// ends every 300 ms: bytes are not events, so the read timeout still ends the
// leg 1 s after the token (each byte used to re-arm it, holding the request
// until its deadline).
TEST_F(BeastEngineClientFakeTimeTest, B13_ByteDripInsideAnUnfinishedEventFailsAtTheReadTimeout) {
  StartDecodeAndAccept(Leg());
  engine_.SendHeaders();
  SendToken("Paris");
  const std::string partial = "data: " + TokenEvent("Lyon");
  for (int i = 0; i < 3; ++i) {
    Advance(300ms);
    SendSseBytes(partial.substr(i, 1));
    ASSERT_FALSE(HasFailure()) << "at byte " << i;
  }
  Advance(100ms - kTick);  // 0.999 s since the token, 0.1 s since the last byte
  ExpectAlive("before the read timeout passed");
  Advance(kTick);
  ExpectReadTimeout(DecodeFailure());
  EXPECT_TRUE(engine_.WaitForClose());
  EXPECT_EQ(observer_.tokens(), 1);
}

// An event that arrives in pieces restarts the read clock when it completes,
// not with each piece: the pieces span more than the read timeout, the
// event's end lands inside it, and the timeout then counts from that end.
TEST_F(BeastEngineClientFakeTimeTest, B13_AnEventCompletedInPiecesRestartsTheClockAtItsEnd) {
  StartDecodeAndAccept(Leg());
  engine_.SendHeaders();
  SendToken("Paris");
  const std::string event = "data: " + TokenEvent("Lyon") + "\n\n";
  const size_t half = event.size() / 2;
  Advance(400ms);
  SendSseBytes(event.substr(0, half));
  Advance(600ms - kTick);  // 0.999 s since the token
  const size_t seen = observer_.kinds().size();
  engine_.SendSse(event.substr(half));
  ASSERT_TRUE(observer_.WaitForEvents(seen + 1)) << "the completed event never arrived";
  Settle();
  Advance(kRead - kTick);
  ExpectAlive("within the read timeout of the completed event");
  Advance(kTick);
  ExpectReadTimeout(DecodeFailure());
  EXPECT_EQ(observer_.tokens(), 2);
}

// A client that does not take the relayed frames (its Flush does not complete)
// pauses the read timeout however far time moves; once it takes them, the
// read timeout runs again from that moment.
TEST_F(BeastEngineClientFakeTimeTest, B13_ClientBackPressurePausesTheReadTimeout) {
  StartDecodeAndAccept(Leg());
  engine_.SendHeaders();
  Settle();
  observer_.HoldFlushes();
  engine_.SendEvent(TokenEvent("Paris"));
  ASSERT_TRUE(observer_.WaitHeld(true)) << "the token's flush never started";
  Settle();
  for (int i = 0; i < 5; ++i) {
    Advance(10 * kRead);
    ExpectAlive("while the client back-pressured the stream");
    ASSERT_FALSE(HasFailure());
  }
  observer_.Release(loop());
  ASSERT_TRUE(observer_.WaitHeld(false));
  Settle();
  ExpectAlive("right after the client took the frames");
  Advance(kRead - kTick);
  ExpectAlive("within the read timeout after the back-pressure ended");
  Advance(kTick);
  ExpectReadTimeout(DecodeFailure());
  EXPECT_EQ(observer_.tokens(), 1);
}

// decode_read_timeout_s = 0: after the first token only the request deadline
// bounds the stream; long silences pass, the deadline ends it.
TEST_F(BeastEngineClientFakeTimeTest, B13_ZeroReadTimeoutFallsBackToTheRequestDeadline) {
  HttpEngineClientOptions options = Options();
  options.decode_read_timeout_s = 0;
  StartClient(options);
  LegOptions leg = Leg();
  leg.request_deadline = clock_.Now() + 30s;
  StartDecodeAndAccept(leg);
  engine_.SendHeaders();
  Advance(1s);
  SendToken("Paris");
  for (int i = 0; i < 3; ++i) {
    Advance(9s);
    ExpectAlive("with no read timeout, before the request deadline");
    ASSERT_FALSE(HasFailure());
  }
  Advance(2s - kTick);  // 29.999 s after the leg started
  ExpectAlive("before the request deadline");
  Advance(kTick);
  ExpectDeadline(DecodeFailure(), Phase::kDecode);
  EXPECT_TRUE(engine_.WaitForClose());
}

// A request deadline inside the first-token budget ends the leg as the
// request's deadline, not as engine evidence.
TEST_F(BeastEngineClientFakeTimeTest, Decode_RequestDeadlineInsideTheFirstTokenBudget) {
  LegOptions leg = Leg();
  leg.request_deadline = clock_.Now() + 1s;
  StartDecodeAndAccept(leg);
  engine_.SendHeaders();
  Settle();
  Advance(1s - kTick);
  ExpectAlive("before the request deadline");
  Advance(kTick);
  ExpectDeadline(DecodeFailure(), Phase::kDecode);
  EXPECT_TRUE(engine_.WaitForClose());
}

// --- the prefill leg ---------------------------------------------------------------

// The prefill leg bound (serving.prefill_timeout_s) expires as an engine
// timeout: 504, evidence against the producer, transient.
TEST_F(BeastEngineClientFakeTimeTest, Prefill_LegBoundExpiresAsAnEngineTimeout) {
  LegOptions leg = Leg();
  leg.leg_deadline = clock_.Now() + 5s;
  StartPrefill(leg);
  ASSERT_TRUE(engine_.AcceptRequest());
  EXPECT_EQ(engine_.request().target(), "/v1/chat/completions");
  Settle();
  Advance(5s - kTick);
  ExpectAlive("before the prefill bound");
  Advance(kTick);
  const std::optional<EngineFailure> failure = PrefillFailure();
  ASSERT_TRUE(failure.has_value());
  const EngineFailure& f = *failure;
  EXPECT_EQ(f.phase, Phase::kPrefill);
  EXPECT_EQ(nt::HttpStatus(f), 504);
  EXPECT_EQ(f.reason, FailureReason::kEngineTimeout);
  EXPECT_EQ(f.breaker_class, BreakerClass::kTimeout);
  EXPECT_EQ(f.evidence_iid, "p0");
  EXPECT_TRUE(f.transient);
  EXPECT_EQ(f.detail, "prefill timed out after 5s");
  EXPECT_TRUE(engine_.WaitForClose());
}

// The request deadline before the prefill bound ends the leg as the
// request's deadline — here while the response body is awaited after its
// headers — and is no evidence against the producer.
TEST_F(BeastEngineClientFakeTimeTest, Prefill_RequestDeadlineIsNotEngineEvidence) {
  LegOptions leg = Leg();
  leg.request_deadline = clock_.Now() + 3s;
  leg.leg_deadline = clock_.Now() + 60s;
  StartPrefill(leg);
  ASSERT_TRUE(engine_.AcceptRequest());
  Settle();
  Advance(2s);
  engine_.SendHeaders("application/json");
  Settle();
  Advance(1s - kTick);
  ExpectAlive("before the request deadline");
  Advance(kTick);
  ExpectDeadline(PrefillFailure(), Phase::kPrefill);
  EXPECT_TRUE(engine_.WaitForClose());
}

// --- B19: cancellation --------------------------------------------------------------

// Cancels `cancel` and reports whether the adapter closed the engine
// connection within one turn of its loop. The loop is held while the token
// fires, so the cancel's work is queued first and a check right behind it;
// the check then holds the loop while it looks for the engine's EOF, so a
// close that needed a further turn (a re-post, a timer, the next read) cannot
// happen meanwhile.
bool CancelClosesWithinOneLoopTurn(const Executor& loop, CancelToken& cancel,
                                   const ScriptedEngine& engine) {
  std::promise<void> holding;
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  asio::post(loop, [&holding, released] {
    holding.set_value();
    released.wait();
  });
  if (holding.get_future().wait_for(kSafety) != std::future_status::ready) {
    release.set_value();
    return false;
  }
  cancel.Cancel();
  auto result = std::make_shared<std::promise<bool>>();
  std::future<bool> closed = result->get_future();
  asio::post(loop, [result, &engine] {
    // The FIN crosses loopback inside close(); the short poll only absorbs
    // kernel scheduling.
    const auto until = std::chrono::steady_clock::now() + 200ms;
    bool seen = engine.PeerClosed();
    while (!seen && std::chrono::steady_clock::now() < until) seen = engine.PeerClosed();
    result->set_value(seen);
  });
  release.set_value();
  return closed.wait_for(kSafety) == std::future_status::ready && closed.get();
}

// Mid-stream, with long timers pending: the cancel closes the engine
// connection within one loop turn and the leg ends as cancelled, with fake
// time never moved.
TEST_F(BeastEngineClientFakeTimeTest, B19_CancelMidStreamClosesTheEngineConnectionAtOnce) {
  const MonoTime t0 = clock_.Now();
  StartDecodeAndAccept(Leg(/*cancellable=*/true));
  engine_.SendHeaders();
  SendToken("Paris");
  ExpectAlive("before the cancel");
  EXPECT_TRUE(CancelClosesWithinOneLoopTurn(loop(), cancel_, engine_));
  ExpectCancelled(DecodeFailure(), Phase::kDecode);
  EXPECT_EQ(clock_.Now(), t0) << "fake time was never moved";
  EXPECT_EQ(observer_.tokens(), 1);
}

// Before the response headers: the same.
TEST_F(BeastEngineClientFakeTimeTest, B19_CancelBeforeTheHeadersClosesTheEngineConnectionAtOnce) {
  const MonoTime t0 = clock_.Now();
  StartDecodeAndAccept(Leg(/*cancellable=*/true));
  ExpectAlive("before the cancel");
  EXPECT_TRUE(CancelClosesWithinOneLoopTurn(loop(), cancel_, engine_));
  ExpectCancelled(DecodeFailure(), Phase::kDecode);
  EXPECT_EQ(clock_.Now(), t0);
}

// A prefill leg waiting on a silent producer: the same.
TEST_F(BeastEngineClientFakeTimeTest, B19_CancelDuringPrefillClosesTheEngineConnectionAtOnce) {
  const MonoTime t0 = clock_.Now();
  LegOptions leg = Leg(/*cancellable=*/true);
  leg.leg_deadline = clock_.Now() + 30s;
  StartPrefill(leg);
  ASSERT_TRUE(engine_.AcceptRequest());
  ExpectAlive("before the cancel");
  EXPECT_TRUE(CancelClosesWithinOneLoopTurn(loop(), cancel_, engine_));
  ExpectCancelled(PrefillFailure(), Phase::kPrefill);
  EXPECT_EQ(clock_.Now(), t0);
}

}  // namespace
}  // namespace narwhal::engines
