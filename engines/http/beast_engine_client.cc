#include "engines/http/beast_engine_client.h"

#include <netinet/in.h>
#include <netinet/tcp.h>

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>

#include "engines/http/connection_pool.h"
#include "engines/http/connector.h"
#include "engines/http/decode_stream.h"
#include "engines/http/leg_failures.h"
#include "engines/http/leg_timer.h"
#include "engines/http/tls_client.h"
#include "engines/json_limits.h"

namespace narwhal::engines {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using boost::system::error_code;
using json = nlohmann::json;

// Room in a leg's read buffer past max_header_bytes: the buffer holds only
// what the parser has not consumed yet (a header block, a chunk header, a
// trailer), so its limit bounds those even where Beast does not.
constexpr size_t kBufferSlack = 64 * 1024;
// How long a finished decode leg may wait for the end of the engine's chunked
// body (it usually follows [DONE] at once) before its connection is pooled.
constexpr auto kDrainBound = std::chrono::seconds(1);

auto Redirect(error_code& ec) { return asio::redirect_error(asio::use_awaitable, ec); }

// The cause of a transport error in plain words.
std::string Cause(const error_code& ec) {
  if (ec == asio::error::connection_refused) return "connection refused";
  if (ec == asio::error::connection_reset) return "connection reset by the engine";
  if (ec == asio::error::broken_pipe) return "connection closed by the engine while sending";
  if (ec == asio::error::eof || ec == http::error::end_of_stream ||
      ec == http::error::partial_message) {
    return "connection closed by the engine";
  }
  if (ec == asio::error::host_not_found || ec == asio::error::host_not_found_try_again) {
    return "host name not found (DNS)";
  }
  if (ec == asio::error::network_unreachable || ec == asio::error::host_unreachable) {
    return "network unreachable";
  }
  if (std::string_view(ec.category().name()) == "beast.http") {
    return "malformed HTTP response (" + ec.message() + ")";
  }
  return ec.message();
}

// Beast's response parser with the adapter's header bounds. Beast limits the
// bytes of a header block it holds at once (header_limit) but neither the
// number of fields nor chunked trailers, which it stores as fields too. This
// parser counts every field as it is parsed, header and trailer alike, and
// fails the read with http::error::header_limit at the first one past
// max_header_fields or max_header_bytes, before it is stored.
template <class Body>
class EngineResponseParser final : public http::response_parser<Body> {
 public:
  explicit EngineResponseParser(const HttpEngineClientOptions& options)
      : max_fields_(options.max_header_fields), max_bytes_(options.max_header_bytes) {
    this->header_limit(static_cast<std::uint32_t>(
        std::min<size_t>(options.max_header_bytes, std::numeric_limits<std::uint32_t>::max())));
  }

  // The read failed on the field count (else, with header_limit, on bytes).
  bool too_many_fields() const { return fields_ > max_fields_; }

 private:
  void on_field_impl(http::field name, beast::string_view name_string, beast::string_view value,
                     error_code& ec) override {
    ++fields_;
    bytes_ += name_string.size() + value.size() + 4;  // "name: value\r\n"
    if (fields_ > max_fields_ || bytes_ > max_bytes_) {
      ec = http::error::header_limit;
      return;
    }
    this->get().insert(name, name_string, value);
  }

  const int max_fields_;
  const size_t max_bytes_;
  int fields_ = 0;
  size_t bytes_ = 0;
};

using DecodeParser = EngineResponseParser<http::buffer_body>;
using StringParser = EngineResponseParser<http::string_body>;

size_t ReadBufferLimit(const HttpEngineClientOptions& options) {
  return options.max_header_bytes + kBufferSlack;
}

// Why a read stopped at one of the response bounds (`what` names the
// response: "prefill response"), or "" when it did not.
template <class Parser>
std::string ResponseBoundError(const error_code& ec, const Parser& parser,
                               const HttpEngineClientOptions& options, std::string_view what) {
  if (ec == http::error::header_limit) {
    if (parser.too_many_fields()) {
      return std::string(what) + " has more than " + std::to_string(options.max_header_fields) +
             " header fields";
    }
    return std::string(what) + " headers exceed " + std::to_string(options.max_header_bytes) +
           " bytes";
  }
  if (ec == http::error::buffer_overflow) {
    return std::string(what) + " framing (a chunk header or trailer) exceeds " +
           std::to_string(ReadBufferLimit(options)) + " bytes";
  }
  return "";
}

// Interim (1xx) responses skipped before a final one, at most: a proxy in
// front of an engine may send 100 Continue (or 103 Early Hints), which
// HTTP/1.1 requires a client to skip; more than a few is no engine.
constexpr int kMaxInterimResponses = 4;

// 1xx but 101: a protocol switch the router never asks for is a final,
// unusable answer.
bool IsInterimStatus(int status) { return status >= 100 && status < 200 && status != 101; }

std::string TooManyInterimResponses(std::string_view what) {
  return std::string(what) + " came after more than " + std::to_string(kMaxInterimResponses) +
         " interim (1xx) responses";
}

// Reads response heads until a final one, each into a fresh parser from
// `make` (a Beast parser reads one message): interim 1xx responses are
// skipped, at most kMaxInterimResponses of them (then *too_many is set and
// the read fails with http::error::bad_status). The leg's timer bounds the
// whole wait.
template <class Parser, class Make>
Awaitable<error_code> ReadFinalHeader(EngineSocket& socket, beast::flat_buffer& buffer,
                                      std::shared_ptr<Parser>& parser, const Make& make,
                                      bool* too_many) {
  error_code ec;
  for (int interim = 0;; ++interim) {
    parser = make();
    co_await http::async_read_header(socket, buffer, *parser, Redirect(ec));
    if (ec || !IsInterimStatus(parser->get().result_int())) co_return ec;
    if (interim == kMaxInterimResponses) {
      *too_many = true;
      co_return http::error::bad_status;
    }
  }
}

// The socket of a leg, shared with a cancellation posted from another thread.
// What one socket read of a decode stream may take.
constexpr size_t kDecodeReadBytes = 4096;

struct LegIo {
  LegIo(const Executor& executor, size_t buffer_limit) : socket(executor), buffer(buffer_limit) {}
  void Close() { socket.Close(); }
  EngineSocket socket;
  beast::flat_buffer buffer;
  bool cancelled = false;
  bool reused = false;  // taken from the pool (may have gone stale)
};

// One leg's connection, timer and cancel hook.
class Leg {
 public:
  // `tls`: the engine is https:// (its connections are TLS sessions of
  // that context, pooled apart from plain ones); null: plain TCP.
  Leg(const Clock& clock, const Executor& executor, std::string host, int port, CancelToken* cancel,
      size_t buffer_limit, std::shared_ptr<const TlsClientContext> tls = nullptr)
      : clock_(clock),
        executor_(executor),
        host_(std::move(host)),
        port_(port),
        key_((tls != nullptr ? "https://" : "") + host_ + ":" + std::to_string(port)),
        tls_(std::move(tls)),
        io_(std::make_shared<LegIo>(executor, buffer_limit)),
        timer_(clock, executor, [io = io_.get()] { io->Close(); }) {
    if (cancel != nullptr) {
      // The token may fire on any thread: the socket is closed on its loop.
      std::weak_ptr<LegIo> weak = io_;
      Executor ex = executor;
      cancel_hook_.emplace(cancel, [weak, ex] {
        asio::post(ex, [weak] {
          if (std::shared_ptr<LegIo> io = weak.lock()) {
            io->cancelled = true;
            io->Close();
          }
        });
      });
    }
  }
  ~Leg() { timer_.Stop(); }

  LegTimer& timer() { return timer_; }
  LegIo& io() { return *io_; }
  bool cancelled() const { return io_->cancelled; }
  const std::string& key() const { return key_; }
  // Why the TLS handshake of the last fresh connection failed ("TLS
  // handshake with https://h:p failed: ..."); empty when it did not.
  const std::string& tls_error() const { return tls_error_; }
  // The leg's connection is a TLS one it opened (not a pooled one).
  bool new_tls() const { return tls_ != nullptr && !io_->reused; }

  // A pooled connection, else a new one.
  Awaitable<error_code> Connect() {
    ConnectionPool& pool = ConnectionPool::Of(executor_);
    if (std::optional<EngineSocket> s = pool.Take(key_, clock_.Now())) {
      io_->socket = std::move(*s);
      io_->reused = true;
      co_return error_code{};
    }
    const error_code ec = co_await ConnectFresh();
    co_return ec;
  }

  Awaitable<error_code> ConnectFresh() {
    ConnectionPool& pool = ConnectionPool::Of(executor_);
    io_->reused = false;
    io_->Close();
    io_->socket = EngineSocket(executor_);
    tls_error_.clear();
    error_code ec;
    std::vector<tcp::endpoint> endpoints;
    if (const auto* cached = pool.Endpoints(key_)) {
      endpoints = *cached;
    } else {
      tcp::resolver resolver(executor_);
      auto results = co_await resolver.async_resolve(host_, std::to_string(port_), Redirect(ec));
      if (ec) co_return ec;
      for (const auto& r : results) endpoints.push_back(r.endpoint());
      pool.SetEndpoints(key_, endpoints);
    }
    co_await asio::async_connect(io_->socket.tcp(), endpoints, Redirect(ec));
    if (ec) {
      pool.ForgetEndpoints(key_);
      co_return ec;
    }
    io_->socket.tcp().set_option(tcp::no_delay(true), ec);
    if (tls_ != nullptr) co_return co_await Handshake();
    co_return error_code{};
  }

  // The TLS handshake of a fresh connection (bounded by the connect timer,
  // like the TCP connect): certificate and server name verified.
  Awaitable<error_code> Handshake() {
    std::string why;
    std::unique_ptr<TlsSession> session =
        TlsSession::Make(*tls_, std::move(io_->socket.tcp()), host_, &why);
    error_code ec;
    if (session == nullptr) {
      ec = asio::error::invalid_argument;
    } else {
      io_->socket.StartTls(std::move(session));
      co_await io_->socket.async_handshake(Redirect(ec));
      if (ec) why = io_->socket.tls()->HandshakeError(ec);
    }
    if (ec) tls_error_ = "TLS handshake with " + key_ + " failed: " + why;
    co_return ec;
  }

  // Gives the connection back for reuse.
  void Pool(size_t max_idle) {
    if (!io_->socket.is_open() || cancelled()) return;
    ConnectionPool::Of(executor_).Put(key_, std::move(io_->socket), clock_, executor_, max_idle);
  }

  std::shared_ptr<LegIo> shared_io() { return io_; }

 private:
  const Clock& clock_;
  Executor executor_;
  std::string host_;
  int port_;
  std::string key_;
  std::shared_ptr<const TlsClientContext> tls_;
  std::string tls_error_;
  std::shared_ptr<LegIo> io_;
  LegTimer timer_;
  std::optional<CancelToken::Registration> cancel_hook_;
};

http::request<http::string_body> LegRequest(http::verb verb, std::string_view path,
                                            const std::string& host_header,
                                            const std::string& request_id,
                                            const std::string& api_key, std::string body,
                                            const LegOptions* trace = nullptr) {
  http::request<http::string_body> req{verb, std::string(path), 11};
  req.set(http::field::host, host_header);
  if (!request_id.empty()) req.set("X-Request-Id", request_id);
  if (trace != nullptr && !trace->traceparent.empty()) {
    req.set("traceparent", trace->traceparent);
    if (!trace->tracestate.empty()) req.set("tracestate", trace->tracestate);
  }
  req.set(http::field::accept, "application/json, text/event-stream");
  if (!api_key.empty()) req.set(http::field::authorization, "Bearer " + api_key);
  if (!body.empty() || verb == http::verb::post) {
    req.set(http::field::content_type, "application/json");
    req.body() = std::move(body);
  }
  req.keep_alive(true);
  req.prepare_payload();
  return req;
}

// Reads the rest of a decode response (its chunked terminator) and pools the
// connection; closes it if the end does not come promptly.
// Feeds `parser` what `buffer` holds, step by step (a chunk header, a chunk's
// body, ...) until it needs more bytes, its body buffer is full, it is done
// or it fails (`ec`). Returns whether it made progress; false: read first.
bool ParseBuffered(beast::flat_buffer& buffer, DecodeParser& parser, error_code& ec) {
  bool progress = false;
  while (buffer.size() > 0 && !parser.is_done()) {
    error_code step;
    const size_t used = parser.put(buffer.data(), step);
    buffer.consume(used);
    if (step == http::error::need_more) break;
    progress = true;
    if (step) {
      ec = step;  // need_buffer (the body buffer is full) or a framing error
      break;
    }
    if (used == 0) break;
  }
  return progress;
}

Awaitable<void> DrainAndPool(std::shared_ptr<LegIo> io, std::shared_ptr<DecodeParser> parser,
                             const Clock& clock, std::string key, size_t max_idle) {
  const Executor executor = co_await asio::this_coro::executor;
  LegTimer timer(clock, executor, [io = io.get()] { io->Close(); });
  timer.Arm(clock.Now() + kDrainBound, LegBound::kLeg);
  char sink[512];
  error_code ec;
  while (!parser->is_done() && !ec) {
    parser->get().body().data = sink;
    parser->get().body().size = sizeof(sink);
    co_await http::async_read_some(io->socket, io->buffer, *parser, Redirect(ec));
    if (ec == http::error::need_buffer) ec = {};
  }
  timer.Stop();
  if (!ec && parser->is_done() && parser->get().keep_alive() && io->buffer.size() == 0 &&
      io->socket.is_open()) {
    ConnectionPool::Of(executor).Put(key, std::move(io->socket), clock, executor, max_idle);
  } else {
    io->Close();
  }
}

}  // namespace

BeastEngineClient::BeastEngineClient(HttpEngineClientOptions options, const Clock& clock)
    : tls_(std::make_shared<const TlsClientContext>(options.tls)),
      options_(std::make_shared<const HttpEngineClientOptions>(std::move(options))),
      clock_(clock) {}

BeastEngineClient::~BeastEngineClient() = default;

void BeastEngineClient::SetOptions(HttpEngineClientOptions options) {
  options_.Publish(std::make_shared<const HttpEngineClientOptions>(std::move(options)));
}

std::shared_ptr<const TlsClientContext> BeastEngineClient::TlsFor(const std::string& url) const {
  return IsTlsEngineUrl(url) ? tls_ : nullptr;
}

namespace {

// Transport failure of a leg that got no response status. A failed TLS
// handshake (`tls_error`) is a failed connect: the engine never got the
// request, and failover and breakers treat it as a refused connection.
// A new TLS connection lost before a response is most often an engine
// that refused the client certificate: with TLS 1.3 it says so only after
// the client's side of the handshake, and the alert may be lost with the
// connection; the detail says so.
EngineFailure TransportFailure(Phase phase, const EngineTarget& target, const error_code& ec,
                               bool connected, const Leg& leg) {
  const std::string& key = leg.key();
  if (!leg.tls_error().empty()) {
    return MakeFailure(phase, target.iid, FailureReason::kEngineUnreachable,
                       BreakerClass::kConnection, FailureCause::kConnectFailed,
                       "engine unreachable: " + leg.tls_error(), true);
  }
  if (!connected) {
    return MakeFailure(phase, target.iid, FailureReason::kEngineUnreachable,
                       BreakerClass::kConnection, FailureCause::kConnectFailed,
                       "engine unreachable: connect to " + key + " failed: " + Cause(ec), true);
  }
  return MakeFailure(
      phase, target.iid, FailureReason::kEngineConnection, BreakerClass::kTimeout,
      FailureCause::kConnectionLost,
      "connection to engine lost before a response (" + key + "): " + Cause(ec) +
          (leg.new_tls() ? " (a new TLS connection: did the engine refuse the client "
                           "certificate? engine.tls.cert_file)"
                         : ""),
      true);
}

}  // namespace

Awaitable<PrefillOutcome> BeastEngineClient::Prefill(EngineTarget producer, Api api,
                                                     const json& client_body, LegOptions options) {
  // The options in force when the leg starts (a reload may change them).
  const std::shared_ptr<const HttpEngineClientOptions> opts_held = options_.Get();
  const HttpEngineClientOptions& opts = *opts_held;
  constexpr Phase kPhase = Phase::kPrefill;
  PrefillOutcome out;
  std::string host;
  int port = 0;
  if (!ParseEngineUrl(producer.url, &host, &port)) {
    out.failure = MakeFailure(kPhase, producer.iid, FailureReason::kEngineUnreachable,
                              BreakerClass::kConnection, FailureCause::kBadUrl,
                              "engine unreachable: bad engine url " + producer.url, false);
    co_return out;
  }
  const MonoTime deadline =
      std::min(options.request_deadline, options.leg_deadline.value_or(MonoTime::max()));
  const bool deadline_is_request = deadline == options.request_deadline;
  const LegBound deadline_bound = deadline_is_request ? LegBound::kRequest : LegBound::kLeg;
  const MonoTime started = clock_.Now();
  auto leg_timeout = [&] {
    return deadline_is_request
               ? DeadlineExpired(kPhase, producer.iid)
               : MakeFailure(
                     kPhase, producer.iid, FailureReason::kEngineTimeout, BreakerClass::kTimeout,
                     FailureCause::kLegTimeout,
                     "prefill timed out after " + FormatSeconds(Seconds(deadline - started)), true);
  };
  if (options.cancel != nullptr && options.cancel->cancelled()) {
    out.failure = Cancelled(kPhase, producer.iid);
    co_return out;
  }
  if (started >= deadline) {
    out.failure = leg_timeout();
    co_return out;
  }

  const Executor executor = co_await asio::this_coro::executor;
  Leg leg(clock_, executor, host, port, options.cancel, ReadBufferLimit(opts),
          TlsFor(producer.url));
  const std::string body = BuildPrefillBody(client_body).dump();
  {
    // A pooled connection is checked before reuse; a failure on it is a
    // failure of the leg (B14 decides about retries, not the transport).
    const MonoTime connect_deadline = clock_.Now() + FromSeconds(opts.connect_timeout_s);
    leg.timer().Arm(std::min(connect_deadline, deadline),
                    connect_deadline < deadline ? LegBound::kConnect : deadline_bound);
    const error_code connect_ec = co_await leg.Connect();
    error_code ec = connect_ec;
    if (leg.cancelled()) {
      out.failure = Cancelled(kPhase, producer.iid);
      co_return out;
    }
    if (leg.timer().fired()) {
      out.failure = leg.timer().fired_bound() == LegBound::kConnect
                        ? ConnectTimeout(kPhase, producer, leg.key(), opts.connect_timeout_s)
                        : leg_timeout();
      co_return out;
    }
    if (ec) {
      out.failure = TransportFailure(kPhase, producer, ec, false, leg);
      co_return out;
    }
    leg.timer().Arm(deadline, deadline_bound);

    auto req = LegRequest(http::verb::post, ApiPath(api), leg.key(), options.backend_request_id,
                          opts.api_key, body, &options);
    co_await http::async_write(leg.io().socket, req, Redirect(ec));
    const auto make_parser = [&opts] {
      auto p = std::make_shared<StringParser>(opts);
      p->body_limit(opts.max_response_bytes);
      return p;
    };
    std::shared_ptr<StringParser> parser_ptr = make_parser();
    bool too_many_interim = false;
    leg.io().buffer.clear();
    if (!ec) {
      ec = co_await ReadFinalHeader(leg.io().socket, leg.io().buffer, parser_ptr, make_parser,
                                    &too_many_interim);
    }
    StringParser& parser = *parser_ptr;
    if (!ec) co_await http::async_read(leg.io().socket, leg.io().buffer, parser, Redirect(ec));
    if (leg.cancelled()) {
      out.failure = Cancelled(kPhase, producer.iid);
      co_return out;
    }
    if (leg.timer().fired()) {
      out.failure = leg_timeout();
      co_return out;
    }
    if (too_many_interim) {
      out.failure = MakeFailure(kPhase, producer.iid, FailureReason::kInvalidResponse,
                                BreakerClass::kInferenceStatus, FailureCause::kResponseBound,
                                TooManyInterimResponses("prefill response"), false);
      co_return out;
    }
    if (ec == http::error::body_limit) {
      out.failure = MakeFailure(kPhase, producer.iid, FailureReason::kInvalidResponse,
                                BreakerClass::kKvHandoff, FailureCause::kNoHandoff,
                                "no handoff: prefill response exceeds " +
                                    std::to_string(opts.max_response_bytes) + " bytes",
                                false);
      co_return out;
    }
    if (std::string bound = ResponseBoundError(ec, parser, opts, "prefill response");
        !bound.empty()) {
      out.failure = MakeFailure(kPhase, producer.iid, FailureReason::kInvalidResponse,
                                BreakerClass::kInferenceStatus, FailureCause::kResponseBound,
                                std::move(bound), false);
      co_return out;
    }
    if (ec) {
      out.failure = parser.is_header_done()
                        ? MakeFailure(kPhase, producer.iid, FailureReason::kEngineConnection,
                                      BreakerClass::kTimeout, FailureCause::kConnectionLost,
                                      "connection to engine lost while reading the prefill "
                                      "response: " +
                                          Cause(ec),
                                      true)
                        : TransportFailure(kPhase, producer, ec, true, leg);
      co_return out;
    }
    leg.timer().Stop();
    const int status = parser.get().result_int();
    const std::string& response = parser.get().body();
    if (status < 200 || status > 299) {
      out.failure = ClassifyEngineStatus(kPhase, producer.iid, status, EngineErrorMessage(response),
                                         /*in_stream=*/false);
    } else {
      std::string why;
      std::optional<json> descriptor;
      if (const JsonVerdict v = CheckJson(response); v != JsonVerdict::kWithin) {
        why = "prefill response " + JsonLimitText(v, response.size());
      } else if (json parsed = ParseCheckedJson(response); parsed.is_discarded()) {
        why = "prefill response is not valid JSON";
      } else {
        descriptor = ExtractDescriptor(parsed, &why);
      }
      if (!descriptor) {
        out.failure = MakeFailure(kPhase, producer.iid, FailureReason::kInvalidResponse,
                                  BreakerClass::kKvHandoff, FailureCause::kNoHandoff,
                                  "no handoff: " + why, false);
      } else {
        ProducerIdentity identity{producer.kv_engine_id, ""};
        int port = 0;
        ParseEngineUrl(producer.url, &identity.host, &port);
        ApplyRemoteHostPolicy(identity, opts.remote_host_policy, &*descriptor);
        out.result.emplace(producer.iid, producer.url, api, options.backend_request_id,
                           opts.connector, std::move(*descriptor), producer.kv_engine_id);
      }
    }
    if (parser.get().keep_alive() && leg.io().buffer.size() == 0) {
      leg.Pool(opts.max_idle_connections);
    }
    co_return out;
  }
}

// The decode leg's I/O: DecodeStream (engines/http/decode_stream.h) decides,
// this loop moves the bytes and arms the timer as it says.
Awaitable<DecodeOutcome> BeastEngineClient::Decode(EngineTarget consumer,
                                                   const PrefillResult& handoff,
                                                   const json& client_body, bool client_streams,
                                                   LegOptions options, DecodeObserver& observer) {
  // The options in force when the leg starts (a reload may change them).
  const std::shared_ptr<const HttpEngineClientOptions> opts_held = options_.Get();
  const HttpEngineClientOptions& opts = *opts_held;
  const MonoTime started = clock_.Now();
  std::string host;
  int port = 0;
  if (std::optional<DecodeOutcome> refused =
          DecodeStream::Refuse(consumer, handoff, opts, options, started, &host, &port)) {
    co_return std::move(*refused);
  }
  DecodeStream stream(opts, consumer, started, options.request_deadline, observer);
  const Executor executor = co_await asio::this_coro::executor;
  Leg leg(clock_, executor, host, port, options.cancel, ReadBufferLimit(opts),
          TlsFor(consumer.url));
  LegTimer& timer = leg.timer();
  const auto arm = [&timer](const LegAlarm& alarm) { timer.Arm(alarm.at, alarm.bound); };
  const bool same_worker = consumer.iid == handoff.producer_iid();
  const std::string body =
      BuildDecodeBody(client_body, handoff, same_worker, client_streams).dump();

  error_code ec;
  auto parser = std::make_shared<DecodeParser>(opts);
  bool connected = false;
  bool too_many_interim = false;
  do {
    arm(stream.Connecting(clock_.Now()));
    ec = co_await leg.Connect();
    if (ec || leg.cancelled() || timer.fired()) break;
    connected = true;
    arm(stream.Connected());
    auto req = LegRequest(http::verb::post, ApiPath(handoff.endpoint()), leg.key(),
                          options.backend_request_id, opts.api_key, body, &options);
    co_await http::async_write(leg.io().socket, req, Redirect(ec));
    if (!ec) stream.RequestSent();
    const auto make_parser = [&opts] {
      auto p = std::make_shared<DecodeParser>(opts);
      p->body_limit(boost::none);  // a stream; SseReader bounds each event
      return p;
    };
    leg.io().buffer.clear();
    if (!ec) {
      ec = co_await ReadFinalHeader(leg.io().socket, leg.io().buffer, parser, make_parser,
                                    &too_many_interim);
    }
  } while (false);

  if (!ec && !leg.cancelled() && !timer.fired()) {
    stream.Head(parser->get().result_int());
    char chunk[16 * 1024];
    // Room for several events per socket read: Beast reads into the free
    // space of this buffer (at least 512 bytes), and a read that fills it
    // makes the next one try the socket again before waiting for it (a
    // wasted recv whenever the engine was ahead of the client by more
    // than that).
    leg.io().buffer.reserve(std::min(kDecodeReadBytes, leg.io().buffer.max_size()));
    // A response whose head was all of it (an error status with an empty
    // body) is complete: reading on would wait for bytes that never come.
    while (!ec && !parser->is_done()) {
      parser->get().body().data = chunk;
      parser->get().body().size = sizeof(chunk);
      // What is buffered is parsed here; Beast reads only when the parser
      // needs more. (Its read, given bytes it parses without reading,
      // completes through a posted handler: one more turn of the loop and
      // one more epoll poll for every chunk.)
      if (!ParseBuffered(leg.io().buffer, *parser, ec)) {
        co_await http::async_read_some(leg.io().socket, leg.io().buffer, *parser, Redirect(ec));
      }
      if (ec == http::error::need_buffer) ec = {};
      const size_t n = sizeof(chunk) - parser->get().body().size;
      if (!stream.Body(std::string_view(chunk, n), clock_.Now())) break;
      if (std::optional<LegAlarm> alarm = stream.TakeAlarm()) arm(*alarm);
      if (stream.status() != 200) continue;
      if (ec || parser->is_done()) break;
      // Everything received so far is parsed (what is left, if anything, is
      // the CRLF that closes a chunk, which the parser consumes with the next
      // chunk's header): hand it to the client in one write before the next
      // socket read.
      if (leg.io().buffer.size() <= 2) {
        if (stream.FlushStarted(clock_.Now())) timer.Pause();
        const bool keep_going = co_await observer.Flush();
        const std::optional<LegAlarm> next = stream.FlushEnded(clock_.Now(), keep_going);
        if (!next) break;
        arm(*next);
      }
    }
  }
  const LegBound fired = timer.fired_bound();
  timer.Stop();
  // What the last read carried reaches the client before the leg's end (its
  // [DONE] or its failure).
  if (!stream.observer_stopped() && !leg.cancelled()) {
    if (!co_await observer.Flush()) stream.ObserverStopped();
  }

  if (stream.Succeeded()) {
    // Generated output, then [DONE]: the connection finishes its body in the
    // background and goes back to the pool.
    if (parser->is_done()) {
      if (parser->get().keep_alive() && leg.io().buffer.size() == 0) {
        leg.Pool(opts.max_idle_connections);
      }
    } else if (!leg.cancelled()) {
      asio::co_spawn(
          executor,
          DrainAndPool(leg.shared_io(), parser, clock_, leg.key(), opts.max_idle_connections),
          asio::detached);
    }
    co_return stream.Finish({});
  }
  leg.io().Close();  // an abnormal end never returns its connection
  DecodeLegEnd end;
  end.cancelled = leg.cancelled();
  end.timed_out = fired;
  end.connection_key = leg.key();
  if (too_many_interim) end.interim_bound = TooManyInterimResponses("decode response");
  end.response_bound = ResponseBoundError(ec, *parser, opts, "decode response");
  if (stream.status() == 0) {
    end.transport = TransportFailure(Phase::kDecode, consumer, ec, connected, leg);
  }
  co_return stream.Finish(std::move(end));
}

Awaitable<ControlResponse> BeastEngineClient::Control(EngineTarget engine, std::string method,
                                                      std::string path, std::string body,
                                                      double timeout_s) {
  // The options in force when the leg starts (a reload may change them).
  const std::shared_ptr<const HttpEngineClientOptions> opts_held = options_.Get();
  const HttpEngineClientOptions& opts = *opts_held;
  ControlResponse out;
  std::string host;
  int port = 0;
  if (!ParseEngineUrl(engine.url, &host, &port)) {
    out.error = "bad engine url " + engine.url;
    co_return out;
  }
  const Executor executor = co_await asio::this_coro::executor;
  Leg leg(clock_, executor, host, port, nullptr, ReadBufferLimit(opts), TlsFor(engine.url));
  const MonoTime deadline = clock_.Now() + FromSeconds(timeout_s);
  const MonoTime connect_deadline = clock_.Now() + FromSeconds(opts.connect_timeout_s);
  leg.timer().Arm(std::min(deadline, connect_deadline), LegBound::kLeg);
  // Control requests use fresh connections: they are rare, and a probe must
  // see the engine as a new client would.
  error_code ec = co_await leg.ConnectFresh();
  const auto make_parser = [&opts] {
    auto p = std::make_shared<StringParser>(opts);
    p->body_limit(opts.max_response_bytes);
    return p;
  };
  std::shared_ptr<StringParser> parser_ptr = make_parser();
  bool too_many_interim = false;
  if (!ec && !leg.timer().fired()) {
    leg.timer().Arm(deadline, LegBound::kLeg);
    const http::verb verb = method == "POST" ? http::verb::post : http::verb::get;
    auto req = LegRequest(verb, path, leg.key(), "", opts.api_key, std::move(body));
    req.keep_alive(false);
    co_await http::async_write(leg.io().socket, req, Redirect(ec));
    if (!ec) {
      ec = co_await ReadFinalHeader(leg.io().socket, leg.io().buffer, parser_ptr, make_parser,
                                    &too_many_interim);
    }
    if (!ec) {
      co_await http::async_read(leg.io().socket, leg.io().buffer, *parser_ptr, Redirect(ec));
    }
  }
  StringParser& parser = *parser_ptr;
  const bool timed_out = leg.timer().fired();
  leg.timer().Stop();
  leg.io().Close();
  if (timed_out) {
    out.error = "no answer from " + leg.key() + " within " + FormatSeconds(timeout_s);
    out.timed_out = true;
  } else if (too_many_interim) {
    out.error = TooManyInterimResponses("response");
  } else if (ec == http::error::body_limit) {
    out.error = "response exceeds " + std::to_string(opts.max_response_bytes) + " bytes";
  } else if (std::string bound = ResponseBoundError(ec, parser, opts, "response"); !bound.empty()) {
    out.error = std::move(bound);
  } else if (!leg.tls_error().empty()) {
    out.error = leg.tls_error();
  } else if (ec) {
    out.error = (parser.is_header_done() ? "connection lost while reading the response from "
                                         : "no response from ") +
                leg.key() + ": " + Cause(ec);
  } else {
    out.status = parser.get().result_int();
    out.body = std::move(parser.get().body());
  }
  co_return out;
}

}  // namespace narwhal::engines
