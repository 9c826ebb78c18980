// TLS to https:// engines: the client context built from engine.tls
// (EngineTlsOptions) and one connection's TLS session.
//
// The context verifies every engine certificate against engine.tls.ca_file
// (unset: the system's default trust store) and the server name (the URL's
// host, or engine.tls.server_name; an IP address is checked against the
// certificate's IP SANs and sent without SNI), presents the client
// certificate when one is configured (mTLS), and speaks TLS 1.2 or later.
// It is built on first use, so a router with no https:// engine never
// reads a trust store.
//
// A session wraps a connected TCP socket; engines/http/engine_socket.h
// drives it. OpenSSL and Asio's ssl headers are included here only, in
// tls_client.cc.
#ifndef NARWHAL_ENGINES_HTTP_TLS_CLIENT_H_
#define NARWHAL_ENGINES_HTTP_TLS_CLIENT_H_

#include <memory>
#include <mutex>
#include <string>

#include "engines/http/engine_socket.h"
#include "engines/http/http_options.h"

namespace narwhal::engines {

class TlsClientContext {
 public:
  explicit TlsClientContext(EngineTlsOptions options);
  ~TlsClientContext();

  const EngineTlsOptions& options() const { return options_; }

  // Checks that the options make a context (files readable, PEM, the key
  // the certificate's): "" when they do, else why, naming the key (e.g.
  // `engine.tls.ca_file "/x.pem": no certificate in the file`).
  static std::string Check(const EngineTlsOptions& options);

 private:
  friend class TlsSession;
  struct Built;
  // The built context, or null with *error set. Thread-safe.
  const Built* Get(std::string* error) const;

  const EngineTlsOptions options_;
  mutable std::once_flag once_;
  mutable std::unique_ptr<Built> built_;
  mutable std::string error_;
};

class TlsSession {
 public:
  // A session over `socket` (connected) to the engine at URL host `host`;
  // null with *error set when the context cannot be built.
  static std::unique_ptr<TlsSession> Make(const TlsClientContext& context, EngineSocket::Tcp socket,
                                          const std::string& host, std::string* error);
  ~TlsSession();

  EngineSocket::Tcp& tcp();
  void AsyncHandshake(EngineSocket::HandshakeHandler handler);
  void AsyncReadSome(boost::asio::mutable_buffer buffer, EngineSocket::IoHandler handler);
  void AsyncWriteSome(boost::asio::const_buffer buffer, EngineSocket::IoHandler handler);

  // Why the handshake failed with `ec`, in words: "certificate verify
  // failed (certificate has expired)" (OpenSSL's verify result), else
  // OpenSSL's reason ("tlsv1 alert unknown ca", "wrong version number").
  std::string HandshakeError(const boost::system::error_code& ec);

 private:
  struct Impl;
  explicit TlsSession(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace narwhal::engines

#endif  // NARWHAL_ENGINES_HTTP_TLS_CLIENT_H_
