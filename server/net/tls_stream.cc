#include "server/net/tls_stream.h"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/read.hpp>

#include "server/net/tls_context.h"

namespace narwhal::server {
namespace {

namespace asio = boost::asio;
namespace http = boost::beast::http;

auto Redirect(boost::system::error_code& ec) {
  return asio::redirect_error(asio::use_awaitable, ec);
}

}  // namespace

class TlsStream::Impl {
 public:
  Impl(asio::ip::tcp::socket& socket, TlsServerContext& context)
      : stream(socket, context.native()) {}

  asio::ssl::stream<asio::ip::tcp::socket&> stream;
};

TlsStream::TlsStream(asio::ip::tcp::socket& socket, TlsServerContext& context)
    : impl_(std::make_unique<Impl>(socket, context)) {}

TlsStream::~TlsStream() = default;

engines::Awaitable<void> TlsStream::Handshake(error_code& ec) {
  co_await impl_->stream.async_handshake(asio::ssl::stream_base::server, Redirect(ec));
}

engines::Awaitable<size_t> TlsStream::ReadSome(asio::mutable_buffer buffer, error_code& ec,
                                               asio::cancellation_slot slot) {
  const size_t n = co_await impl_->stream.async_read_some(
      buffer, asio::bind_cancellation_slot(slot, Redirect(ec)));
  co_return n;
}

engines::Awaitable<size_t> TlsStream::ReadHeader(boost::beast::flat_buffer& buffer,
                                                 RequestParserBase& parser, error_code& ec) {
  const size_t n = co_await http::async_read_header(impl_->stream, buffer, parser, Redirect(ec));
  co_return n;
}

engines::Awaitable<size_t> TlsStream::ReadSomeBody(boost::beast::flat_buffer& buffer,
                                                   RequestParserBase& parser, error_code& ec) {
  const size_t n = co_await http::async_read_some(impl_->stream, buffer, parser, Redirect(ec));
  co_return n;
}

engines::Awaitable<void> TlsStream::Write(asio::const_buffer data, error_code& ec) {
  co_await asio::async_write(impl_->stream, data, Redirect(ec));
}

}  // namespace narwhal::server
