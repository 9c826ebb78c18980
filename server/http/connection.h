// Connection: one client connection of the HTTP door, as one coroutine on
// one event loop.
//
// Run() reads requests with Beast's parser, one after another (pipelined
// requests are answered in order), dispatches each to the routes and writes
// its response, until the client closes, a bound passes or a response ends
// the connection. Bounds (server/http/http_door_options.h): the wait for a
// request's first byte (header timeout on a new connection, keep-alive
// timeout between requests), the header timeout from that byte to the end of
// the headers (408 once a request line arrived, else closed unanswered),
// a body's total read time (header timeout plus a second per
// min_body_bytes_per_s bytes received, within the body timeout),
// header count and bytes (431; a chunked body's trailer fields count with
// the head's), the body limit for either framing (413), chunked framing
// whose lines end in a bare LF (400) and the silence and total bounds while
// a body arrives, the
// write timeout of a response. A request with both Content-Length and
// Transfer-Encoding, or a coding other than chunked, is refused with 400 and
// ends the connection (request smuggling). Every such refusal of a request
// whose request line arrived goes through HttpRoutes::Refuse, which journals
// it (`invalid`, with the status sent) when it names a generation route.
//
// A generation request runs inside this coroutine (HttpRoutes::Serve, i.e.
// Router::Serve) with an SseSink; meanwhile a concurrent read watches the
// client: end of file or an error cancels the request (B19). That read keeps
// at most max_header_bytes of pipelined bytes, then stops watching.
//
// Not thread-safe: runs on its socket's loop; Stop-by-tracker is posted there.
#ifndef NARWHAL_SERVER_HTTP_CONNECTION_H_
#define NARWHAL_SERVER_HTTP_CONNECTION_H_

#include <memory>
#include <string>
#include <string_view>

#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>

#include "engines/clock.h"
#include "engines/engine_client.h"
#include "server/net/client_socket.h"
#include "server/http/connection_tracker.h"
#include "server/http/http_door_options.h"
#include "server/http/routes.h"

namespace narwhal::server {

class RequestParser;
class SseSink;

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  // Registers with `tracker` (which may refuse it: Run() then ends at once).
  // A non-null `capacity_refusal` makes it a reserve connection, beyond
  // serving.max_connections: it carries one GET /health, /ready or /metrics,
  // head and answer within options.reserve_timeout, and answers anything
  // else with those bytes (the door's at-capacity 503), then closes.
  // Everything referenced must outlive the connection.
  Connection(boost::asio::ip::tcp::socket socket, const engines::Clock& clock,
             const HttpDoorOptions& options, HttpRoutes& routes, ConnectionTracker& tracker,
             const std::string* capacity_refusal = nullptr);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Serves the connection to its end; co_spawn it on executor().
  engines::Awaitable<void> Run();
  engines::Executor executor() { return socket_->socket().get_executor(); }

 private:
  enum class Next { kKeepAlive, kClose, kLingerClose };

  engines::Awaitable<Next> ServeOne(bool first);
  // The one request of a reserve connection.
  engines::Awaitable<void> ServeReserved();
  // A request whose head failed to parse (`ec` says why) or did not arrive
  // within the header timeout.
  engines::Awaitable<Next> RefuseHead(RequestParser& parser, boost::system::error_code ec);
  engines::Awaitable<Next> Refuse(const HttpRequest& partial, std::string_view path,
                                  router::Reason reason, std::string message);
  std::string BodyTooLarge() const;
  // The 431 message: too many header (and trailer) fields, or too many bytes.
  std::string HeadersTooLarge(const RequestParser& parser) const;
  // Bytes read and not yet consumed by the parser.
  std::string_view PendingBytes() const;
  // The time a body may take for `received` bytes of it, past the header
  // timeout (options.min_body_bytes_per_s).
  engines::MonoClock::duration BodyAllowance(size_t received) const;
  // Feeds the buffered bytes to `parser` (the error it found, need_more
  // aside).
  boost::system::error_code ParseBuffered(RequestParser& parser);
  engines::Awaitable<Next> Generate(router::Request request, unsigned version, bool keep_alive);
  engines::Awaitable<void> ServeAndStopWatch(router::Request request,
                                             std::shared_ptr<SseSink> sink);
  engines::Awaitable<void> WatchClient(std::shared_ptr<SseSink> sink);
  engines::Awaitable<Next> Write(HttpResponse& response, unsigned version, bool keep_alive);
  // Stops sending, drops what the client still sends for a bounded while,
  // then closes (so the client reads the last response rather than a reset).
  engines::Awaitable<void> LingeringClose();

  std::shared_ptr<ClientSocket> socket_;
  const HttpDoorOptions& options_;
  HttpRoutes& routes_;
  ConnectionTracker& tracker_;
  uint64_t id_ = 0;
  const std::string* capacity_refusal_;  // non-null: a reserve connection
  // Bytes read from the client and not yet parsed (pipelined requests).
  boost::beast::flat_buffer buffer_;
  // Ends the client watch once the request it guards has ended.
  boost::asio::cancellation_signal watch_cancel_;
  bool watch_stop_ = false;
};

}  // namespace narwhal::server

#endif  // NARWHAL_SERVER_HTTP_CONNECTION_H_
