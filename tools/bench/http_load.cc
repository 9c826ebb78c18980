// HTTP load: one Boost.Asio io_context run by Options::threads threads; one
// coroutine per worker on its own strand, with its own keep-alive
// connections (the direct mode keeps one to the prefill engine and one to
// the decode engine). Beast parses the responses; an SSE response is read
// incrementally into a fixed per-worker buffer.
#include <array>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <exception>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tools/bench/load.h"
#include "tools/bench/sse_frames.h"

namespace narwhal::bench {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using Strand = net::strand<net::io_context::executor_type>;

constexpr size_t kReadBuffer = 8192;
constexpr size_t kMaxPrefillBody = 1 << 20;
constexpr size_t kMaxErrorExcerpt = 300;

auto Await(beast::error_code& ec) { return net::redirect_error(net::use_awaitable, ec); }

struct Endpoint {
  std::string host_header;
  tcp::endpoint address;
};

// "HOST:PORT" or "http://HOST:PORT[/...]".
bool Resolve(std::string spec, Endpoint* out, std::string* error) {
  if (spec.rfind("http://", 0) == 0) spec = spec.substr(7);
  spec = spec.substr(0, spec.find('/'));
  const size_t colon = spec.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == spec.size()) {
    *error = "expected HOST:PORT, got \"" + spec + "\"";
    return false;
  }
  std::string host = spec.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  net::io_context ioc;
  tcp::resolver resolver(ioc);
  beast::error_code ec;
  const auto results = resolver.resolve(host, spec.substr(colon + 1), ec);
  if (ec || results.empty()) {
    *error = "cannot resolve " + spec + ": " + ec.message();
    return false;
  }
  out->host_header = spec;
  out->address = results.begin()->endpoint();
  return true;
}

std::string Excerpt(std::string_view text) {
  std::string out(text.substr(0, kMaxErrorExcerpt));
  for (char& c : out) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return out;
}

// One keep-alive connection.
struct Conn {
  explicit Conn(const Strand& strand) : socket(strand), buffer(kReadBuffer) {}
  void Close() {
    beast::error_code ec;
    socket.close(ec);
    open = false;
    buffer.consume(buffer.size());
  }
  tcp::socket socket;
  beast::flat_buffer buffer;  // at most kReadBuffer bytes
  bool open = false;
};

struct Shared {
  const Options& options;
  const Bodies bodies;
  Endpoint target, prefill;  // target is the decode engine in direct mode
  Window window;
  std::atomic<int> active{0};
};

class Worker {
 public:
  Worker(net::io_context& ioc, int index, Shared& shared)
      : strand_(net::make_strand(ioc)),
        index_(index),
        shared_(shared),
        main_(strand_),
        prefill_(strand_),
        timer_(strand_) {}

  const Strand& strand() const { return strand_; }
  Tally& tally() { return tally_; }

  net::awaitable<void> Run() {
    const Options& o = shared_.options;
    beast::error_code ec;
    if (o.ramp_s > 0) {
      timer_.expires_at(shared_.window.start +
                        std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double>(o.ramp_s * index_ / o.concurrency)));
      co_await timer_.async_wait(Await(ec));
    }
    while (shared_.window.open()) {
      const long long n = shared_.window.next_request++;
      phase_ = Phase::kWaiting;
      const std::string error = co_await Once(n);
      if (!shared_.window.open()) {
        ++tally_.cut;
        if (phase_ != Phase::kStreaming) ++tally_.cut_waiting;
        if (phase_ == Phase::kConnecting) ++tally_.cut_connecting;
        break;
      }
      if (error.empty()) {
        ++tally_.ok;
        continue;
      }
      tally_.Fail(error);
      main_.Close();
      prefill_.Close();
      timer_.expires_after(kFailureBackoff);
      co_await timer_.async_wait(Await(ec));
    }
  }

  // Runs on the strand after the window closed: aborts whatever is pending.
  void Stop() {
    main_.Close();
    prefill_.Close();
    timer_.cancel();
  }

 private:
  // One client request; returns "" on success, else what went wrong.
  net::awaitable<std::string> Once(long long n) {
    const Options& o = shared_.options;
    const auto start = Clock::now();
    const std::string rid = "bench-" + std::to_string(n);
    if (o.mode != Mode::kDirect) {
      co_return co_await Stream(shared_.target, shared_.bodies.Stream(n), rid, start);
    }
    std::string descriptor;
    std::string error = co_await Prefill(shared_.bodies.Prefill(n), rid + "-p", &descriptor);
    if (!error.empty()) co_return error;
    co_return co_await Stream(shared_.target, shared_.bodies.Decode(n, descriptor), rid + "-d",
                              start);
  }

  http::request<http::string_body> Post(const Endpoint& ep, std::string body,
                                        const std::string& rid) const {
    http::request<http::string_body> req{http::verb::post, shared_.bodies.path(), 11};
    req.set(http::field::host, ep.host_header);
    req.set(http::field::content_type, "application/json");
    req.set(http::field::accept, "application/json, text/event-stream");
    req.set("X-Request-Id", rid);
    req.keep_alive(true);
    req.body() = std::move(body);
    req.prepare_payload();
    return req;
  }

  // Connects when needed, writes the request and reads the response header.
  // A reused connection that turns out to be closed by the peer before any
  // byte of the response is retried once on a fresh connection.
  template <class Parser>
  net::awaitable<std::string> Exchange(Conn& c, const Endpoint& ep,
                                       const http::request<http::string_body>& req, Parser& p) {
    beast::error_code ec;
    for (int attempt = 0;; ++attempt) {
      if (!shared_.window.open()) co_return "stopped";
      const bool reused = c.open;
      if (!c.open) {
        const Phase before = phase_;
        phase_ = Phase::kConnecting;
        co_await c.socket.async_connect(ep.address, Await(ec));
        phase_ = before;
        if (ec) {
          c.Close();
          co_return "connect " + ep.host_header + ": " + ec.message();
        }
        c.socket.set_option(tcp::no_delay(true), ec);
        c.open = true;
      }
      co_await http::async_write(c.socket, req, Await(ec));
      if (!ec) co_await http::async_read_header(c.socket, c.buffer, p, Await(ec));
      if (!ec) co_return "";
      c.Close();
      const bool stale = ec == http::error::end_of_stream || ec == net::error::eof ||
                         ec == net::error::connection_reset || ec == net::error::broken_pipe;
      if (!(reused && stale && !p.got_some() && attempt == 0)) {
        co_return "request to " + ep.host_header + ": " + ec.message();
      }
    }
  }

  // Reads what is left of a non-200 response into an excerpt.
  net::awaitable<std::string> ErrorText(Conn& c, http::response_parser<http::buffer_body>& p) {
    std::string text;
    beast::error_code ec;
    while (!p.is_done() && text.size() < kMaxErrorExcerpt) {
      p.get().body().data = body_.data();
      p.get().body().size = body_.size();
      co_await http::async_read_some(c.socket, c.buffer, p, Await(ec));
      if (ec == http::error::need_buffer) ec = {};
      if (ec) break;
      text.append(body_.data(), body_.size() - p.get().body().size);
    }
    if (ec || !p.is_done() || !p.keep_alive()) c.Close();
    co_return Excerpt(text);
  }

  // The streaming leg: counts generated-token frames and stamps the first.
  net::awaitable<std::string> Stream(const Endpoint& ep, std::string body, const std::string& rid,
                                     Clock::time_point start) {
    const auto req = Post(ep, std::move(body), rid);
    http::response_parser<http::buffer_body> p;
    p.body_limit(boost::none);
    std::string error = co_await Exchange(main_, ep, req, p);
    if (!error.empty()) co_return error;
    const unsigned status = p.get().result_int();
    if (status != 200) {
      co_return "HTTP " + std::to_string(status) + ": " + co_await ErrorText(main_, p);
    }
    SseSplitter sse;
    bool first = false, done = false;
    auto on_event = [&](std::string_view payload) {
      switch (ClassifyFrame(payload)) {
        case FrameKind::kToken:
          if (shared_.window.open()) {
            ++tally_.frames;
            if (!first) tally_.ttft_s.push_back(Seconds(Clock::now() - start));
          }
          first = true;
          phase_ = Phase::kStreaming;
          break;
        case FrameKind::kDone:
          done = true;
          break;
        case FrameKind::kError:
          if (error.empty()) error = "error event: " + Excerpt(payload);
          break;
        case FrameKind::kMeta:
          break;
      }
    };
    beast::error_code ec;
    while (!p.is_done()) {
      p.get().body().data = body_.data();
      p.get().body().size = body_.size();
      co_await http::async_read_some(main_.socket, main_.buffer, p, Await(ec));
      if (ec == http::error::need_buffer) ec = {};
      if (ec) {
        main_.Close();
        co_return error.empty() ? "stream: " + ec.message() : error;
      }
      if (!sse.Feed(std::string_view(body_.data(), body_.size() - p.get().body().size), on_event)) {
        main_.Close();
        co_return "stream: SSE line too long";
      }
    }
    if (!p.keep_alive()) main_.Close();
    if (!error.empty()) co_return error;
    if (!done) co_return "stream ended before the [DONE] terminator";
    if (!first) co_return "stream ended without a generated token";
    co_return "";
  }

  // The direct mode's prefill leg; *descriptor gets kv_transfer_params.
  net::awaitable<std::string> Prefill(std::string body, const std::string& rid,
                                      std::string* descriptor) {
    const auto req = Post(shared_.prefill, std::move(body), rid);
    http::response_parser<http::string_body> p;
    p.body_limit(kMaxPrefillBody);
    std::string error = co_await Exchange(prefill_, shared_.prefill, req, p);
    if (!error.empty()) co_return "prefill: " + error;
    beast::error_code ec;
    co_await http::async_read(prefill_.socket, prefill_.buffer, p, Await(ec));
    if (ec) {
      prefill_.Close();
      co_return "prefill: " + ec.message();
    }
    if (!p.keep_alive()) prefill_.Close();
    const std::string& text = p.get().body();
    if (p.get().result_int() != 200) {
      co_return "prefill HTTP " + std::to_string(p.get().result_int()) + ": " + Excerpt(text);
    }
    const nlohmann::json doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!doc.is_object()) co_return "prefill: response is not a JSON object";
    const nlohmann::json* kv = nullptr;
    if (auto it = doc.find("kv_transfer_params"); it != doc.end() && it->is_object()) {
      kv = &*it;
    } else if (auto choices = doc.find("choices"); choices != doc.end() && choices->is_array() &&
                                                   !choices->empty() && (*choices)[0].is_object()) {
      auto inner = (*choices)[0].find("kv_transfer_params");
      if (inner != (*choices)[0].end() && inner->is_object()) kv = &*inner;
    }
    if (kv == nullptr) co_return "no handoff: the prefill response has no kv_transfer_params";
    *descriptor = kv->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    co_return "";
  }

  // Where the current request is, for the cut ones.
  enum class Phase { kWaiting, kConnecting, kStreaming };

  Strand strand_;
  const int index_;
  Phase phase_ = Phase::kWaiting;
  Shared& shared_;
  Conn main_;     // the streaming target (decode engine in direct mode)
  Conn prefill_;  // direct mode only
  net::steady_timer timer_;
  Tally tally_;
  std::array<char, kReadBuffer> body_{};
};

// Samples how late a 10 ms timer fires on the loop: a busy load driver
// shows up here before it shows up in the numbers it reports.
net::awaitable<void> LagProbe(Window& window, Tally& tally) {
  net::steady_timer timer(co_await net::this_coro::executor);
  beast::error_code ec;
  auto next = Clock::now();
  while (window.open()) {
    next += kLagProbeInterval;
    timer.expires_at(next);
    co_await timer.async_wait(Await(ec));
    const auto now = Clock::now();
    tally.loop_lag_s.push_back(Seconds(now - next));
    if (now - next > kLagProbeInterval) next = now;  // no catch-up bursts
  }
}

}  // namespace

bool RunHttpLoad(const Options& o, Meter& meter, RunResult* result, std::string* error) {
  Shared shared{o, Bodies(o), {}, {}, {}, {}};
  if (!Resolve(o.mode == Mode::kDirect ? o.decode : o.target, &shared.target, error)) return false;
  if (o.mode == Mode::kDirect && !Resolve(o.prefill, &shared.prefill, error)) return false;

  net::io_context ioc(o.threads);
  std::vector<std::unique_ptr<Worker>> workers;
  workers.reserve(o.concurrency);
  for (int i = 0; i < o.concurrency; ++i)
    workers.push_back(std::make_unique<Worker>(ioc, i, shared));
  Tally lag;
  auto guard = net::make_work_guard(ioc);

  shared.window.start = Clock::now();
  shared.window.end = shared.window.start + std::chrono::duration_cast<Clock::duration>(
                                                std::chrono::duration<double>(o.duration_s));
  meter.Start();
  shared.active = o.concurrency;
  for (auto& w : workers) {
    Worker* worker = w.get();
    net::co_spawn(worker->strand(), worker->Run(), [&shared, worker](std::exception_ptr e) {
      if (e) {
        try {
          std::rethrow_exception(e);
        } catch (const std::exception& ex) {
          worker->tally().Fail(std::string("worker error: ") + ex.what());
        }
      }
      --shared.active;
    });
  }
  net::co_spawn(net::make_strand(ioc), LagProbe(shared.window, lag), net::detached);
  std::vector<std::thread> threads;
  for (int i = 0; i < o.threads; ++i) threads.emplace_back([&ioc] { ioc.run(); });

  std::this_thread::sleep_until(shared.window.end);
  shared.window.stopping = true;
  meter.Stop();
  const auto drain_start = Clock::now();
  for (auto& w : workers) {
    Worker* worker = w.get();
    net::post(worker->strand(), [worker] { worker->Stop(); });
  }
  while (shared.active.load() > 0 && Clock::now() - drain_start < kDrainLimit) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  result->drain_s = Seconds(Clock::now() - drain_start);
  const int stuck = shared.active.load();
  guard.reset();
  ioc.stop();
  for (std::thread& t : threads) t.join();

  for (auto& w : workers) result->tally.Merge(w->tally());
  result->tally.Merge(lag);
  if (stuck > 0) {
    std::cerr << "narwhal-bench: " << stuck << " workers did not stop within "
              << std::chrono::duration<double>(kDrainLimit).count() << " s\n";
  }
  return true;
}

}  // namespace narwhal::bench
