// ClientSocket: one client connection's socket and the timer that bounds it.
//
// Every read and write of the connection — the request reader, the watch for
// a client that goes away, the SSE sink — goes through this one socket on
// the connection's loop; the timer (server/http/door_timer.h) closes it when
// the bound of the moment passes, which ends the operation waiting on it —
// except the header bound: a head that stops arriving only has its read
// cancelled, so the connection can still answer it (408) when it got as far
// as a request line.
//
// Not thread-safe: used from the connection's loop only.
#ifndef NARWHAL_SERVER_HTTP_CLIENT_SOCKET_H_
#define NARWHAL_SERVER_HTTP_CLIENT_SOCKET_H_

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/write.hpp>

#include "engines/clock.h"
#include "engines/engine_client.h"
#include "server/http/door_timer.h"

namespace narwhal::server {

class ClientSocket {
 public:
  using tcp = boost::asio::ip::tcp;
  using error_code = boost::system::error_code;

  ClientSocket(tcp::socket socket, const engines::Clock& clock)
      : socket_(std::move(socket)),
        clock_(clock),
        timer_(clock, socket_.get_executor(), [this] { OnExpire(); }) {}
  ClientSocket(const ClientSocket&) = delete;
  ClientSocket& operator=(const ClientSocket&) = delete;

  tcp::socket& socket() { return socket_; }
  DoorTimer& timer() { return timer_; }
  const engines::Clock& clock() const { return clock_; }
  engines::MonoTime Now() const { return clock_.Now(); }
  bool open() const { return socket_.is_open(); }

  // Ends every pending operation on the socket; idempotent.
  void Close() {
    error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
  }

  // Writes all of `buffers` by `deadline` (else closes the socket and
  // returns timed_out).
  template <typename ConstBuffers>
  engines::Awaitable<error_code> Write(const ConstBuffers& buffers, engines::MonoTime deadline) {
    error_code ec;
    timer_.Arm(deadline, DoorBound::kWrite);
    co_await boost::asio::async_write(socket_, buffers,
                                      boost::asio::redirect_error(boost::asio::use_awaitable, ec));
    timer_.Pause();
    if (timer_.fired()) ec = boost::asio::error::timed_out;
    co_return ec;
  }

  // Serializes and writes one Beast message by `deadline`.
  template <typename Message>
  engines::Awaitable<error_code> WriteMessage(Message& message, engines::MonoTime deadline) {
    error_code ec;
    timer_.Arm(deadline, DoorBound::kWrite);
    co_await boost::beast::http::async_write(
        socket_, message, boost::asio::redirect_error(boost::asio::use_awaitable, ec));
    timer_.Pause();
    if (timer_.fired()) ec = boost::asio::error::timed_out;
    co_return ec;
  }

 private:
  void OnExpire() {
    if (timer_.fired_bound() == DoorBound::kHeader) {
      error_code ignored;
      socket_.cancel(ignored);
      return;
    }
    Close();
  }

  tcp::socket socket_;
  const engines::Clock& clock_;
  DoorTimer timer_;
};

}  // namespace narwhal::server

#endif  // NARWHAL_SERVER_HTTP_CLIENT_SOCKET_H_
