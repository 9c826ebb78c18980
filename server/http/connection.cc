#include "server/http/connection.h"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>
#include <utility>

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>

#include "server/client_request_id.h"
#include "server/http/request_parser.h"
#include "server/http/sse_sink.h"
#include "server/net/tls_context.h"
#include "server/status_table.h"

namespace narwhal::server {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using boost::system::error_code;
using engines::Awaitable;
using engines::MonoTime;

// One socket read.
constexpr size_t kReadSize = 16 * 1024;
// Room past max_header_bytes, so Beast reports an oversized header block as
// header_limit (431) rather than a full buffer.
constexpr size_t kBufferSlack = 16 * 1024;

// The door's own refusals (server/admission) and their messages.
constexpr router::Reason kMalformed = router::Reason::kMalformedHttp;
constexpr router::Reason kTooLarge = router::Reason::kTooLarge;
constexpr router::Reason kHeadersTooLarge = router::Reason::kHeadersTooLarge;
constexpr router::Reason kHeaderTimeout = router::Reason::kHeaderTimeout;
constexpr const char* kLengthConflict =
    "a request with both Content-Length and Transfer-Encoding is not allowed";
constexpr const char* kUnsupportedCoding = "Transfer-Encoding other than chunked is not supported";

auto Redirect(error_code& ec) { return asio::redirect_error(asio::use_awaitable, ec); }

std::string_view PathOf(std::string_view target) { return target.substr(0, target.find('?')); }

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// "10 s", "0.3 s".
std::string SecondsText(engines::MonoClock::duration d) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g s", engines::Seconds(d));
  return buf;
}

bool IsHttpSyntaxError(const error_code& ec) {
  return &ec.category() == &http::make_error_code(http::error::bad_method).category();
}

router::Outcome MissingOutcome() {
  return router::RefusalOutcome(router::Terminal::kFailed, router::Reason::kInternal,
                                "the request ended without an outcome");
}

// Counts a generation response as in progress for the graceful drain.
class ResponseScope {
 public:
  explicit ResponseScope(ConnectionTracker& tracker) : tracker_(tracker) {
    tracker_.BeginResponse();
  }
  ~ResponseScope() { tracker_.EndResponse(); }
  ResponseScope(const ResponseScope&) = delete;
  ResponseScope& operator=(const ResponseScope&) = delete;

 private:
  ConnectionTracker& tracker_;
};

}  // namespace

Connection::Connection(asio::ip::tcp::socket socket, const engines::Clock& clock,
                       const HttpDoorOptions& options, HttpRoutes& routes,
                       ConnectionTracker& tracker, const std::string* capacity_refusal)
    : socket_(std::make_shared<ClientSocket>(std::move(socket), clock, options.tls.get())),
      options_(options),
      routes_(routes),
      tracker_(tracker),
      capacity_refusal_(capacity_refusal),
      buffer_(options.max_header_bytes + kBufferSlack) {
  id_ = tracker_.Add(socket_, socket_->socket().get_executor(), capacity_refusal_ != nullptr);
  if (id_ == 0) socket_->Close();
}

Connection::~Connection() {
  socket_->Close();
  if (id_ != 0) tracker_.Remove(id_);
}

std::string Connection::HeadersTooLarge(const RequestParser& parser) const {
  // Header and trailer fields count together.
  if (parser.too_many_fields()) {
    return "request has more than serving.max_headers (" + std::to_string(options_.max_headers) +
           ") header fields";
  }
  return "request headers exceed serving.max_header_bytes (" +
         std::to_string(options_.max_header_bytes) + " bytes)";
}

engines::MonoClock::duration Connection::BodyAllowance(size_t received) const {
  if (options_.min_body_bytes_per_s == 0) return options_.body_timeout;
  return engines::FromSeconds(static_cast<double>(received) /
                              static_cast<double>(options_.min_body_bytes_per_s));
}

error_code Connection::ParseBuffered(RequestParser& parser) {
  error_code ec;
  if (buffer_.size() == 0 || parser.is_done()) return ec;
  parser.eager(true);  // every element the buffer holds, not just the next one
  buffer_.consume(parser.put(buffer_.data(), ec));
  if (ec == http::error::need_more) ec = {};
  return ec;
}

std::string_view Connection::PendingBytes() const {
  return std::string_view(static_cast<const char*>(buffer_.data().data()), buffer_.size());
}

std::string Connection::BodyTooLarge() const {
  return "request body exceeds serving.max_request_bytes (" +
         std::to_string(options_.max_body_bytes) + " bytes)";
}

Awaitable<void> Connection::Run() {
  const std::shared_ptr<Connection> self = shared_from_this();
  if (capacity_refusal_ != nullptr) {
    co_await ServeReserved();
    socket_->Close();
    co_return;
  }
  if (socket_->tls() && socket_->open()) {
    // Bounded like the wait for a first byte; a failure is no request (not
    // journaled), only counted and logged by the context.
    const error_code ec = co_await socket_->Handshake(socket_->Now() + options_.header_timeout);
    if (ec) {
      std::string why = ec == asio::error::timed_out
                            ? "not completed within serving.header_timeout_s (" +
                                  SecondsText(options_.header_timeout) + ")"
                            : ec.message();
      options_.tls->HandshakeFailed(why);
      socket_->Close();
      co_return;
    }
  }
  Next next = Next::kKeepAlive;
  for (bool first = true; next == Next::kKeepAlive && socket_->open(); first = false) {
    try {
      next = co_await ServeOne(first);
    } catch (const std::exception&) {
      next = Next::kClose;  // e.g. allocation failure: this connection only
    }
  }
  if (next == Next::kLingerClose && socket_->open()) co_await LingeringClose();
  socket_->Close();
}

Awaitable<void> Connection::ServeReserved() {
  // Everything — handshake, head, answer — within one short bound, so the
  // reserve's few slots turn over even when each is taken by a slow client.
  const MonoTime deadline = socket_->Now() + options_.reserve_timeout;
  if (socket_->tls() && socket_->open()) {
    const error_code ec = co_await socket_->Handshake(deadline);
    if (ec) {
      std::string why =
          ec == asio::error::timed_out ? "not completed within the reserve's bound" : ec.message();
      options_.tls->HandshakeFailed(why);
      co_return;
    }
  }
  DoorTimer& timer = socket_->timer();
  error_code ec;
  timer.Arm(deadline, DoorBound::kIdle);  // closes the socket: no answer owed
  RequestParser parser(options_.max_header_bytes, options_.max_headers, /*max_body_bytes=*/0);
  co_await socket_->ReadHeader(buffer_, parser, ec);
  timer.Pause();
  if (ec == http::error::body_limit) ec = {};  // a body is refused below
  if (ec || timer.fired() || !socket_->open()) co_return;
  const HttpRequest& request = parser.get();
  const std::string_view path = PathOf(request.target());
  const bool probe = request.method() == http::verb::get && parser.is_done() &&
                     (path == "/health" || path == "/ready" || path == "/metrics");
  if (!probe) {
    ec = co_await socket_->Write(asio::buffer(*capacity_refusal_), deadline);
    co_return;
  }
  HttpResponse response = routes_.Plain(request, path);
  FinishForWire(response, request.version() == 10 ? 10 : 11, /*keep_alive=*/false);
  ec = co_await socket_->WriteMessage(response, deadline);
}

Awaitable<Connection::Next> Connection::ServeOne(bool first) {
  DoorTimer& timer = socket_->timer();
  error_code ec;
  // The wait for the request's first byte (unless pipelined bytes are here).
  if (buffer_.size() == 0) {
    timer.Arm(socket_->Now() + (first ? options_.header_timeout : options_.keepalive_timeout),
              DoorBound::kIdle);
    const size_t n = co_await socket_->ReadSome(buffer_.prepare(kReadSize), ec);
    buffer_.commit(n);
    timer.Pause();
    if (ec || timer.fired()) co_return Next::kClose;
  }

  // The head, from that first byte on.
  const MonoTime started = socket_->Now();
  timer.Arm(started + options_.header_timeout, DoorBound::kHeader);
  RequestParser parser(options_.max_header_bytes, options_.max_headers, options_.max_body_bytes);
  co_await socket_->ReadHeader(buffer_, parser, ec);
  timer.Pause();
  if (ec || timer.fired()) co_return co_await RefuseHead(parser, ec);

  HttpRequest& request = parser.get();
  const std::string_view path = PathOf(request.target());
  // One framing only (request smuggling): Beast itself refuses
  // Content-Length with chunked; any other coding is refused here.
  if (parser.length_conflict()) {
    co_return co_await Refuse(request, path, kMalformed, kLengthConflict);
  }
  if (parser.transfer_encodings() > 0 &&
      (parser.transfer_encodings() > 1 || !parser.chunked() ||
       !beast::iequals(Trim(request[http::field::transfer_encoding]), "chunked"))) {
    co_return co_await Refuse(request, path, kMalformed, kUnsupportedCoding);
  }

  // The body: bounded in size while it is read, and in time.
  if (!parser.is_done()) {
    if (request.version() >= 11 &&
        beast::iequals(Trim(request[http::field::expect]), "100-continue")) {
      http::response<http::empty_body> proceed{http::status::continue_, 11};
      ec = co_await socket_->WriteMessage(proceed, socket_->Now() + options_.write_timeout);
      if (ec) co_return Next::kClose;
    }
    const MonoTime body_deadline = started + options_.body_timeout;
    const MonoTime body_started = socket_->Now();
    bool bare_lf = false;
    while (!parser.is_done() && !ec) {
      // What is buffered is parsed first: Beast would wait for more bytes
      // before it looked at a framing line that can never end.
      ec = ParseBuffered(parser);
      bare_lf = !ec && BareLfInChunkedFraming(parser, PendingBytes());
      if (ec || bare_lf || parser.is_done()) break;
      // Silence, the body's pace and the request bound, whichever is first.
      const MonoTime paced = body_started + options_.header_timeout +
                             BodyAllowance(request.body().size());
      timer.Arm(std::min({socket_->Now() + options_.header_timeout, paced, body_deadline}),
                DoorBound::kBody);
      co_await socket_->ReadSomeBody(buffer_, parser, ec);
    }
    timer.Pause();
    if (timer.fired()) co_return Next::kClose;
    if (bare_lf) {
      std::string message =
          "malformed HTTP request body: a chunked framing line ends in a bare LF (CRLF required)";
      co_return co_await Refuse(request, path, kMalformed, std::move(message));
    }
    if (ec == http::error::body_limit) {
      co_return co_await Refuse(request, path, kTooLarge, BodyTooLarge());
    }
    if (ec == http::error::header_limit || ec == http::error::buffer_overflow) {
      // Trailer fields count against the head's limits (RequestParser).
      std::string message = HeadersTooLarge(parser);
      co_return co_await Refuse(request, path, kHeadersTooLarge, std::move(message));
    }
    if (IsHttpSyntaxError(ec) && ec != http::error::partial_message &&
        ec != http::error::end_of_stream) {
      std::string message = "malformed HTTP request body: " + ec.message();
      co_return co_await Refuse(request, path, kMalformed, std::move(message));
    }
    if (ec) co_return Next::kClose;
  }

  const unsigned version = request.version();
  const bool keep_alive = request.keep_alive() && !routes_.draining();
  if (!routes_.IsGeneration(request.method(), path)) {
    HttpResponse response = routes_.Plain(request, path);
    co_return co_await Write(response, version, keep_alive);
  }
  Admission admission = routes_.Admit(request, path);
  if (!admission.request) co_return co_await Write(admission.refusal, version, keep_alive);
  co_return co_await Generate(std::move(*admission.request), version, keep_alive);
}

Awaitable<Connection::Next> Connection::RefuseHead(RequestParser& parser, error_code ec) {
  DoorTimer& timer = socket_->timer();
  if (!socket_->open()) co_return Next::kClose;
  // What Beast parsed of the head — nothing when it stopped before the end
  // of the head (too large, too slow): then the request line as it arrived,
  // if it did.
  HttpRequest line;
  const bool unparsed = parser.get().target().empty();
  const bool line_read =
      unparsed && ParseRequestLine(std::string_view(static_cast<const char*>(buffer_.data().data()),
                                                    buffer_.size()),
                                   &line);
  const HttpRequest& partial = line_read ? line : parser.get();
  const std::string_view path = PathOf(partial.target());
  // Messages are built before each co_await: GCC 12 mishandles temporaries
  // of a conditional expression that spans a suspension.
  if (timer.fired()) {
    // Only the header bound leaves the socket open (ClientSocket); a head
    // cut before its request line never became a request: closed unanswered.
    if (timer.fired_bound() != DoorBound::kHeader || partial.target().empty()) {
      co_return Next::kClose;
    }
    timer.ClearExpiry();
    std::string message = "request headers not received within serving.header_timeout_s (" +
                          SecondsText(options_.header_timeout) + ")";
    co_return co_await Refuse(partial, path, kHeaderTimeout, std::move(message));
  }
  if (ec == http::error::header_limit || ec == http::error::buffer_overflow) {
    std::string message = HeadersTooLarge(parser);
    co_return co_await Refuse(partial, path, kHeadersTooLarge, std::move(message));
  }
  if (ec == http::error::body_limit) {  // a Content-Length over the limit
    co_return co_await Refuse(partial, path, kTooLarge, BodyTooLarge());
  }
  const bool conflict = (ec == http::error::bad_transfer_encoding && parser.saw_content_length()) ||
                        (ec == http::error::bad_content_length && parser.transfer_encodings() > 0);
  if (conflict) co_return co_await Refuse(partial, path, kMalformed, kLengthConflict);
  if (IsHttpSyntaxError(ec) && ec != http::error::partial_message &&
      ec != http::error::end_of_stream) {
    std::string message = "malformed HTTP request: " + ec.message();
    co_return co_await Refuse(partial, path, kMalformed, std::move(message));
  }
  co_return Next::kClose;  // the client went away or the socket failed
}

Awaitable<Connection::Next> Connection::Refuse(const HttpRequest& partial, std::string_view path,
                                               router::Reason reason, std::string message) {
  Refusal refusal;
  refusal.reason = reason;
  refusal.message = std::move(message);
  HttpResponse response = routes_.Refuse(partial, path, std::move(refusal));
  FinishForWire(response, partial.version() == 10 ? 10 : 11, /*keep_alive=*/false);
  const error_code ec =
      co_await socket_->WriteMessage(response, socket_->Now() + options_.write_timeout);
  // The rest of the request was not read: the connection cannot carry another.
  co_return ec ? Next::kClose : Next::kLingerClose;
}

Awaitable<Connection::Next> Connection::Write(HttpResponse& response, unsigned version,
                                              bool keep_alive) {
  FinishForWire(response, version, keep_alive);
  const error_code ec =
      co_await socket_->WriteMessage(response, socket_->Now() + options_.write_timeout);
  if (ec) co_return Next::kClose;
  co_return keep_alive ? Next::kKeepAlive : Next::kLingerClose;
}

Awaitable<Connection::Next> Connection::Generate(router::Request request, unsigned version,
                                                 bool keep_alive) {
  using namespace asio::experimental::awaitable_operators;  // NOLINT(build/namespaces)
  ResponseScope in_progress(tracker_);
  const std::string rid = request.rid;
  const std::string client_rid = request.client_rid;
  auto sink = std::make_shared<SseSink>(socket_, rid, version, keep_alive);
  sink->set_client_rid(client_rid);
  watch_stop_ = false;
  co_await (ServeAndStopWatch(std::move(request), sink) && WatchClient(sink));

  const router::Outcome outcome = sink->outcome() ? *sink->outcome() : MissingOutcome();
  // Nobody is listening (B19), or the client stopped taking the stream.
  if (outcome.terminal == router::Terminal::kCancelled || sink->broken() || !socket_->open()) {
    co_return Next::kClose;
  }
  const MonoTime deadline = socket_->Now() + options_.write_timeout;
  if (sink->committed()) {
    const std::string last = outcome.ok()
                                 ? std::string("[DONE]")
                                 : TerminalStreamEvent(outcome).dump(
                                       -1, ' ', false, nlohmann::json::error_handler_t::replace);
    if (!co_await sink->End(last, deadline)) co_return Next::kClose;
    // HTTP/1.0 streams end with the connection.
    co_return (keep_alive && version >= 11) ? Next::kKeepAlive : Next::kLingerClose;
  }
  HttpResponse response = OutcomeResponse(outcome);
  response.set("x-request-id", rid);
  if (!client_rid.empty()) response.set(kClientRequestIdHeader, client_rid);
  co_return co_await Write(response, version, keep_alive);
}

Awaitable<void> Connection::ServeAndStopWatch(router::Request request,
                                              std::shared_ptr<SseSink> sink) {
  // However Serve ends, the watch ends with it.
  struct StopWatch {
    Connection* connection;
    ~StopWatch() {
      connection->watch_stop_ = true;
      connection->watch_cancel_.emit(asio::cancellation_type::terminal);
    }
  } stop{this};
  co_await routes_.Serve(std::move(request), std::move(sink));
}

Awaitable<void> Connection::WatchClient(std::shared_ptr<SseSink> sink) {
  const size_t limit = options_.max_header_bytes;
  error_code ec;
  while (!watch_stop_ && socket_->open()) {
    // Enough pipelined bytes are held: stop reading (and watching).
    if (buffer_.size() >= limit) co_return;
    const size_t room = std::min(kReadSize, limit - buffer_.size());
    const size_t n = co_await socket_->ReadSome(buffer_.prepare(room), ec, watch_cancel_.slot());
    buffer_.commit(n);
    if (watch_stop_) co_return;
    if (ec) break;
  }
  if (!watch_stop_) sink->cancel_token().Cancel();  // B19: the client went away
}

Awaitable<void> Connection::LingeringClose() {
  // On the TCP socket itself, TLS or not: what the client still sends is
  // dropped unread (for TLS, undecrypted). No TLS close_notify is sent: a
  // framed response is whole without it (only an HTTP/1.0 stream, which ends
  // with the connection, may look cut short to a strict TLS client).
  error_code ec;
  socket_->socket().shutdown(asio::ip::tcp::socket::shutdown_send, ec);
  if (ec) co_return;
  socket_->timer().Arm(socket_->Now() + options_.linger_timeout, DoorBound::kLinger);
  for (size_t dropped = 0; dropped < options_.linger_bytes && !ec;) {
    buffer_.clear();
    dropped += co_await socket_->socket().async_read_some(buffer_.prepare(kReadSize), Redirect(ec));
  }
  socket_->timer().Pause();
}

}  // namespace narwhal::server
