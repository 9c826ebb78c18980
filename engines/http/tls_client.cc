#include "engines/http/tls_client.h"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

#include <boost/asio/ip/address.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <utility>

namespace narwhal::engines {
namespace {

namespace asio = boost::asio;
namespace ssl = asio::ssl;
using boost::system::error_code;

// `<key> "<path>": <what>`, the form of every configuration error.
std::string FileError(const char* key, const std::string& path, const std::string& what) {
  return std::string(key) + " \"" + path + "\": " + what;
}

// OpenSSL's reason for the last failure of a load, else the error's text.
std::string LoadReason(const error_code& ec) {
  const unsigned long e = ERR_peek_last_error();
  const char* reason = e != 0 ? ERR_reason_error_string(e) : nullptr;
  ERR_clear_error();
  return reason != nullptr ? reason : ec.message();
}

}  // namespace

struct TlsClientContext::Built {
  Built() : context(ssl::context::tls_client) {}
  ssl::context context;
};

TlsClientContext::TlsClientContext(EngineTlsOptions options) : options_(std::move(options)) {}
TlsClientContext::~TlsClientContext() = default;

const TlsClientContext::Built* TlsClientContext::Get(std::string* error) const {
  std::call_once(once_, [this] {
    auto built = std::make_unique<Built>();
    SSL_CTX* ctx = built->context.native_handle();
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    built->context.set_verify_mode(ssl::verify_peer);
    error_code ec;
    if (options_.ca_file.empty()) {
      built->context.set_default_verify_paths(ec);
      if (ec) error_ = "engine.tls.ca_file unset: the system's trust store: " + LoadReason(ec);
    } else {
      built->context.load_verify_file(options_.ca_file, ec);
      if (ec) {
        error_ = FileError("engine.tls.ca_file", options_.ca_file,
                           "cannot load a PEM CA bundle: " + LoadReason(ec));
      }
    }
    if (error_.empty() && !options_.cert_file.empty()) {
      built->context.use_certificate_chain_file(options_.cert_file, ec);
      if (ec) {
        error_ = FileError("engine.tls.cert_file", options_.cert_file,
                           "cannot load a PEM certificate chain: " + LoadReason(ec));
      }
    }
    if (error_.empty() && !options_.key_file.empty()) {
      built->context.use_private_key_file(options_.key_file, ssl::context::pem, ec);
      if (ec) {
        error_ = FileError("engine.tls.key_file", options_.key_file,
                           "cannot load a PEM private key: " + LoadReason(ec));
      } else if (SSL_CTX_check_private_key(ctx) != 1) {
        ERR_clear_error();
        error_ = FileError("engine.tls.key_file", options_.key_file,
                           "is not the key of engine.tls.cert_file \"" + options_.cert_file + "\"");
      }
    }
    if (error_.empty()) built_ = std::move(built);
  });
  if (built_ == nullptr && error != nullptr) *error = error_;
  return built_.get();
}

std::string TlsClientContext::Check(const EngineTlsOptions& options) {
  if (options.cert_file.empty() != options.key_file.empty()) {
    return options.cert_file.empty()
               ? "engine.tls.cert_file is required with engine.tls.key_file (both or neither)"
               : "engine.tls.key_file is required with engine.tls.cert_file (both or neither)";
  }
  TlsClientContext context(options);
  std::string error;
  context.Get(&error);
  return error;
}

struct TlsSession::Impl {
  Impl(EngineSocket::Tcp socket, ssl::context& context) : stream(std::move(socket), context) {}
  ssl::stream<EngineSocket::Tcp> stream;
};

TlsSession::TlsSession(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TlsSession::~TlsSession() = default;

std::unique_ptr<TlsSession> TlsSession::Make(const TlsClientContext& context,
                                             EngineSocket::Tcp socket, const std::string& host,
                                             std::string* error) {
  const TlsClientContext::Built* built = context.Get(error);
  if (built == nullptr) return nullptr;
  // SSL_new (in the stream) holds its own reference to the SSL_CTX.
  auto impl = std::make_unique<Impl>(std::move(socket), const_cast<ssl::context&>(built->context));
  SSL* ssl_handle = impl->stream.native_handle();
  const std::string& name =
      context.options().server_name.empty() ? host : context.options().server_name;
  error_code not_ip;
  asio::ip::make_address(name, not_ip);
  if (!not_ip) {
    // An address: checked against the IP SANs; SNI carries host names only.
    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl_handle), name.c_str());
  } else {
    SSL_set_tlsext_host_name(ssl_handle, name.c_str());
    SSL_set1_host(ssl_handle, name.c_str());
  }
  return std::unique_ptr<TlsSession>(new TlsSession(std::move(impl)));
}

EngineSocket::Tcp& TlsSession::tcp() { return impl_->stream.next_layer(); }

void TlsSession::AsyncHandshake(EngineSocket::HandshakeHandler handler) {
  impl_->stream.async_handshake(ssl::stream_base::client, std::move(handler));
}

void TlsSession::AsyncReadSome(asio::mutable_buffer buffer, EngineSocket::IoHandler handler) {
  impl_->stream.async_read_some(buffer, std::move(handler));
}

void TlsSession::AsyncWriteSome(asio::const_buffer buffer, EngineSocket::IoHandler handler) {
  impl_->stream.async_write_some(buffer, std::move(handler));
}

std::string TlsSession::HandshakeError(const error_code& ec) {
  const long verify = SSL_get_verify_result(impl_->stream.native_handle());
  if (verify != X509_V_OK) {
    return std::string("certificate verify failed (") + X509_verify_cert_error_string(verify) + ")";
  }
  if (ec == asio::error::eof || ec == ssl::error::stream_truncated) {
    return "the engine closed the connection during the handshake";
  }
  return ec.message();
}

}  // namespace narwhal::engines
