// TlsStream: the TLS layer of one client connection of the HTTP door, over
// the connection's TCP socket (server/net/client_socket.h owns both).
//
// Each operation is one coroutine that reports its error in `ec` (none
// throws). ClientSocket routes its reads and writes here when the door
// serves TLS; the plaintext path never enters this file. The TCP socket
// stays the connection's: closing or cancelling it ends the operation
// pending here, as it does on a plaintext connection. One read and one write
// may be pending at once (the client watch reads while a stream writes).
//
// Not thread-safe: used from the connection's loop only. Asio's SSL and
// OpenSSL headers stay in the .cc.
#ifndef NARWHAL_SERVER_NET_TLS_STREAM_H_
#define NARWHAL_SERVER_NET_TLS_STREAM_H_

#include <boost/asio/buffer.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/basic_parser.hpp>
#include <cstddef>
#include <memory>

#include "engines/engine_client.h"

namespace narwhal::server {

class TlsServerContext;

class TlsStream {
 public:
  using error_code = boost::system::error_code;
  using RequestParserBase = boost::beast::http::basic_parser<true>;

  // `socket` and `context` must outlive the stream.
  TlsStream(boost::asio::ip::tcp::socket& socket, TlsServerContext& context);
  ~TlsStream();
  TlsStream(const TlsStream&) = delete;
  TlsStream& operator=(const TlsStream&) = delete;

  // The server side of the handshake.
  engines::Awaitable<void> Handshake(error_code& ec);
  // Decrypted bytes into `buffer`; `slot` (when connected) cancels the read.
  engines::Awaitable<size_t> ReadSome(boost::asio::mutable_buffer buffer, error_code& ec,
                                      boost::asio::cancellation_slot slot = {});
  // Beast's http::async_read_header / async_read_some over the stream.
  engines::Awaitable<size_t> ReadHeader(boost::beast::flat_buffer& buffer,
                                        RequestParserBase& parser, error_code& ec);
  engines::Awaitable<size_t> ReadSomeBody(boost::beast::flat_buffer& buffer,
                                          RequestParserBase& parser, error_code& ec);
  // All of `data`, as TLS records of up to 16 KiB.
  engines::Awaitable<void> Write(boost::asio::const_buffer data, error_code& ec);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace narwhal::server

#endif  // NARWHAL_SERVER_NET_TLS_STREAM_H_
