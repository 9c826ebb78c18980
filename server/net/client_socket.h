// ClientSocket: one client connection's socket and the timer that bounds it.
//
// Every read and write of the connection — the request reader, the watch for
// a client that goes away, the SSE sink — goes through this one socket on
// the connection's loop; the timer (server/net/door_timer.h) closes it when
// the bound of the moment passes, which ends the operation waiting on it —
// except the header bound: a head that stops arriving only has its read
// cancelled, so the connection can still answer it (408) when it got as far
// as a request line.
//
// With a TlsServerContext the connection speaks TLS: Handshake() first, then
// every read and write goes through the TlsStream (server/net/tls_stream.h)
// over the same TCP socket, and a write's buffers are first copied into one
// reused staging buffer (one TLS record per 16 KiB, not one per buffer).
// Without one the socket is used directly, as it always was: a branch per
// operation, no virtual call, no allocation.
//
// Not thread-safe: used from the connection's loop only.
#ifndef NARWHAL_SERVER_NET_CLIENT_SOCKET_H_
#define NARWHAL_SERVER_NET_CLIENT_SOCKET_H_

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/buffers_suffix.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>
#include <memory>
#include <sstream>
#include <string>

#include "engines/clock.h"
#include "engines/engine_client.h"
#include "server/net/door_timer.h"
#include "server/net/tls_stream.h"

namespace narwhal::server {

// The completion token of every operation below: the error into `ec`.
inline auto RedirectTo(boost::system::error_code& ec) {
  return boost::asio::redirect_error(boost::asio::use_awaitable, ec);
}

class ClientSocket {
 public:
  using tcp = boost::asio::ip::tcp;
  using error_code = boost::system::error_code;

  // `tls` null: plaintext. Else it must outlive the socket.
  ClientSocket(tcp::socket socket, const engines::Clock& clock, TlsServerContext* tls = nullptr)
      : socket_(std::move(socket)),
        clock_(clock),
        timer_(clock, socket_.get_executor(), [this] { OnExpire(); }),
        tls_(tls == nullptr ? nullptr : std::make_unique<TlsStream>(socket_, *tls)) {
    // Write() tries the socket at once; a blocking socket would block there.
    error_code ignored;
    socket_.non_blocking(true, ignored);
  }
  ClientSocket(const ClientSocket&) = delete;
  ClientSocket& operator=(const ClientSocket&) = delete;

  tcp::socket& socket() { return socket_; }
  DoorTimer& timer() { return timer_; }
  const engines::Clock& clock() const { return clock_; }
  engines::MonoTime Now() const { return clock_.Now(); }
  bool open() const { return socket_.is_open(); }
  bool tls() const { return tls_ != nullptr; }

  // Ends every pending operation on the socket; idempotent.
  void Close() {
    error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
  }

  // The TLS handshake (TLS connections only) by `deadline` (else closes the
  // socket and returns timed_out).
  engines::Awaitable<error_code> Handshake(engines::MonoTime deadline) {
    error_code ec;
    timer_.Arm(deadline, DoorBound::kHandshake);
    co_await tls_->Handshake(ec);
    timer_.Pause();
    if (timer_.fired()) ec = boost::asio::error::timed_out;
    co_return ec;
  }

  // Reads what is there into `buffer` (at least one byte, or an error). A
  // connected `slot` cancels the read.
  engines::Awaitable<size_t> ReadSome(boost::asio::mutable_buffer buffer, error_code& ec,
                                      boost::asio::cancellation_slot slot = {}) {
    if (tls_) {
      const size_t n = co_await tls_->ReadSome(buffer, ec, slot);
      co_return n;
    }
    if (slot.is_connected()) {
      const size_t n = co_await socket_.async_read_some(
          buffer, boost::asio::bind_cancellation_slot(slot, RedirectTo(ec)));
      co_return n;
    }
    const size_t n = co_await socket_.async_read_some(buffer, RedirectTo(ec));
    co_return n;
  }

  // Beast's http::async_read_header and async_read_some (of a body) with
  // `parser` over the connection's stream.
  template <typename Parser>
  engines::Awaitable<size_t> ReadHeader(boost::beast::flat_buffer& buffer, Parser& parser,
                                        error_code& ec) {
    if (tls_) {
      const size_t n = co_await tls_->ReadHeader(buffer, parser, ec);
      co_return n;
    }
    const size_t n =
        co_await boost::beast::http::async_read_header(socket_, buffer, parser, RedirectTo(ec));
    co_return n;
  }
  template <typename Parser>
  engines::Awaitable<size_t> ReadSomeBody(boost::beast::flat_buffer& buffer, Parser& parser,
                                          error_code& ec) {
    if (tls_) {
      const size_t n = co_await tls_->ReadSomeBody(buffer, parser, ec);
      co_return n;
    }
    const size_t n =
        co_await boost::beast::http::async_read_some(socket_, buffer, parser, RedirectTo(ec));
    co_return n;
  }

  // Writes all of `buffers` by `deadline` (else closes the socket and
  // returns timed_out).
  template <typename ConstBuffers>
  engines::Awaitable<error_code> Write(const ConstBuffers& buffers, engines::MonoTime deadline) {
    error_code ec;
    if (tls_) {
      timer_.Arm(deadline, DoorBound::kWrite);
      // One staging copy (its capacity is kept): the TLS layer writes one
      // record per buffer it is given.
      tls_out_.resize(boost::asio::buffer_size(buffers));
      boost::asio::buffer_copy(boost::asio::buffer(tls_out_), buffers);
      co_await tls_->Write(boost::asio::buffer(tls_out_), ec);
    } else {
      // Most writes fit the socket's send buffer: sent at once, they cost one
      // send and no turn of the loop (an asynchronous write that completes at
      // once posts its completion, and the loop polls epoll once more).
      const size_t sent = socket_.write_some(buffers, ec);
      if (!ec && sent == boost::asio::buffer_size(buffers)) {
        timer_.Pause();
        co_return ec;
      }
      if (ec == boost::asio::error::would_block || ec == boost::asio::error::try_again) ec = {};
      if (!ec) {
        timer_.Arm(deadline, DoorBound::kWrite);
        boost::beast::buffers_suffix<ConstBuffers> rest(buffers);
        rest.consume(sent);
        co_await boost::asio::async_write(socket_, rest, RedirectTo(ec));
      }
    }
    timer_.Pause();
    if (timer_.fired()) ec = boost::asio::error::timed_out;
    co_return ec;
  }

  // Serializes and writes one Beast message by `deadline`.
  template <typename Message>
  engines::Awaitable<error_code> WriteMessage(Message& message, engines::MonoTime deadline) {
    if (tls_) {
      std::ostringstream out;
      out << message;
      const std::string text = out.str();
      const error_code ec = co_await Write(boost::asio::buffer(text), deadline);
      co_return ec;
    }
    error_code ec;
    timer_.Arm(deadline, DoorBound::kWrite);
    co_await boost::beast::http::async_write(socket_, message, RedirectTo(ec));
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
  std::unique_ptr<TlsStream> tls_;  // over socket_; null: plaintext
  std::string tls_out_;             // the staging buffer of TLS writes
};

}  // namespace narwhal::server

#endif  // NARWHAL_SERVER_NET_CLIENT_SOCKET_H_
