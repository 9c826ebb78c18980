#include "engines/http/engine_socket.h"

#include "engines/http/tls_client.h"

namespace narwhal::engines {

EngineSocket::EngineSocket(const Executor& executor) : tcp_(executor) {}
EngineSocket::EngineSocket(EngineSocket&& other) noexcept = default;
EngineSocket& EngineSocket::operator=(EngineSocket&& other) noexcept = default;
EngineSocket::~EngineSocket() = default;

void EngineSocket::Close() {
  boost::system::error_code ignored;
  Tcp& socket = tcp();
  socket.shutdown(Tcp::shutdown_both, ignored);
  socket.close(ignored);
}

void EngineSocket::StartTls(std::unique_ptr<TlsSession> session) { tls_ = std::move(session); }

EngineSocket::Tcp& EngineSocket::TlsTcp() { return tls_->tcp(); }

void EngineSocket::StartHandshake(HandshakeHandler handler) {
  tls_->AsyncHandshake(std::move(handler));
}

void EngineSocket::TlsRead(boost::asio::mutable_buffer buffer, IoHandler handler) {
  tls_->AsyncReadSome(buffer, std::move(handler));
}

void EngineSocket::TlsWrite(boost::asio::const_buffer buffer, IoHandler handler) {
  tls_->AsyncWriteSome(buffer, std::move(handler));
}

}  // namespace narwhal::engines
