// EngineSocket: one connection to an engine, plain TCP (http:// engines) or
// TLS (https:// engines), as the stream Beast reads and writes.
//
// A plain connection's reads and writes are the TCP socket's own, behind one
// branch: the relay's hot path is what it is without TLS. A TLS connection's
// go through its TlsSession (engines/http/tls_client.h), type-erased, so
// that OpenSSL and Asio's ssl headers stay in one translation unit; each
// call hands the session the first non-empty buffer, as Asio's ssl stream
// itself writes one buffer per call.
//
// Not thread-safe: a connection belongs to the loop that uses it.
#ifndef NARWHAL_ENGINES_HTTP_ENGINE_SOCKET_H_
#define NARWHAL_ENGINES_HTTP_ENGINE_SOCKET_H_

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <cstddef>
#include <memory>
#include <utility>

#include "engines/clock.h"

namespace narwhal::engines {

class TlsSession;  // engines/http/tls_client.h

class EngineSocket {
 public:
  using Tcp = boost::asio::ip::tcp::socket;
  using executor_type = Tcp::executor_type;
  using IoHandler =
      boost::asio::any_completion_handler<void(boost::system::error_code, std::size_t)>;
  using HandshakeHandler = boost::asio::any_completion_handler<void(boost::system::error_code)>;

  explicit EngineSocket(const Executor& executor);
  EngineSocket(EngineSocket&& other) noexcept;
  EngineSocket& operator=(EngineSocket&& other) noexcept;
  ~EngineSocket();

  executor_type get_executor() { return tcp_.get_executor(); }

  // The TCP socket: the connection itself, or the one under the TLS session.
  Tcp& tcp() { return tls_ == nullptr ? tcp_ : TlsTcp(); }
  bool is_open() { return tcp().is_open(); }
  // Shuts the TCP connection down and closes it (no TLS close_notify: the
  // engine sees the connection end, as with a plain one).
  void Close();

  // Runs TLS over the connected TCP socket from now on (before the
  // handshake).
  void StartTls(std::unique_ptr<TlsSession> session);
  TlsSession* tls() { return tls_.get(); }

  template <class Token>
  auto async_handshake(Token&& token) {
    return boost::asio::async_initiate<Token, void(boost::system::error_code)>(
        [this](auto handler) { StartHandshake(std::move(handler)); }, token);
  }

  template <class MutableBufferSequence, class Token>
  auto async_read_some(const MutableBufferSequence& buffers, Token&& token) {
    return boost::asio::async_initiate<Token, void(boost::system::error_code, std::size_t)>(
        [this](auto handler, const MutableBufferSequence& b) {
          if (tls_ == nullptr) {
            tcp_.async_read_some(b, std::move(handler));
          } else {
            TlsRead(First<boost::asio::mutable_buffer>(b), std::move(handler));
          }
        },
        token, buffers);
  }

  template <class ConstBufferSequence, class Token>
  auto async_write_some(const ConstBufferSequence& buffers, Token&& token) {
    return boost::asio::async_initiate<Token, void(boost::system::error_code, std::size_t)>(
        [this](auto handler, const ConstBufferSequence& b) {
          if (tls_ == nullptr) {
            tcp_.async_write_some(b, std::move(handler));
          } else {
            TlsWrite(First<boost::asio::const_buffer>(b), std::move(handler));
          }
        },
        token, buffers);
  }

 private:
  template <class Buffer, class Sequence>
  static Buffer First(const Sequence& buffers) {
    auto end = boost::asio::buffer_sequence_end(buffers);
    for (auto it = boost::asio::buffer_sequence_begin(buffers); it != end; ++it) {
      Buffer b(*it);
      if (b.size() > 0) return b;
    }
    return Buffer();
  }

  Tcp& TlsTcp();
  void StartHandshake(HandshakeHandler handler);
  void TlsRead(boost::asio::mutable_buffer buffer, IoHandler handler);
  void TlsWrite(boost::asio::const_buffer buffer, IoHandler handler);

  Tcp tcp_;
  std::unique_ptr<TlsSession> tls_;
};

}  // namespace narwhal::engines

#endif  // NARWHAL_ENGINES_HTTP_ENGINE_SOCKET_H_
