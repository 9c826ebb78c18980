// TlsServerContext: a door's TLS configuration — one OpenSSL server
// context built from a checked certificate and key (server/tls_files.h),
// shared by every client connection — and the tally of failed handshakes.
//
// TLS 1.2 and 1.3 only. For the HTTP door, HTTP/1.1 (ALPN is not
// negotiated: a client that offers h2 falls back to HTTP/1.1); for the gRPC
// door, ALPN selects h2 (a client that does not offer it is refused). A handshake that fails (a
// plaintext client, an unknown certificate authority, a client that stalls past the header timeout)
// never became a request: it is not journaled, only counted
// (`narwhal_tls_handshake_failures_total`, when a registry is given) and
// logged, the first one and then at most one line a minute with the count.
//
// Thread-safe: connections on every loop share it. The OpenSSL headers stay
// in the .cc and in server/net/tls_stream.cc.
#ifndef NARWHAL_SERVER_NET_TLS_CONTEXT_H_
#define NARWHAL_SERVER_NET_TLS_CONTEXT_H_

#include <absl/status/statusor.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string_view>

#include "server/tls_files.h"

namespace boost::asio::ssl {
class context;
}  // namespace boost::asio::ssl

namespace prometheus {
class Counter;
class Registry;
}  // namespace prometheus

namespace narwhal::server {

class TlsServerContext {
 public:
  // Which door the context serves: the HTTP door negotiates no ALPN
  // (HTTP/1.1), the gRPC door selects "h2" (gRPC clients require it).
  enum class Door { kHttp, kGrpc };
  // `registry` may be null (no metric). Fails when OpenSSL refuses the pair.
  static absl::StatusOr<std::shared_ptr<TlsServerContext>> Create(const TlsPem& pem,
                                                                  prometheus::Registry* registry,
                                                                  Door door = Door::kHttp);
  ~TlsServerContext();
  TlsServerContext(const TlsServerContext&) = delete;
  TlsServerContext& operator=(const TlsServerContext&) = delete;

  boost::asio::ssl::context& native() { return *context_; }

  // One connection's handshake failed for `why`.
  void HandshakeFailed(std::string_view why);
  uint64_t handshake_failures() const { return failures_.load(std::memory_order_relaxed); }

 private:
  TlsServerContext(std::unique_ptr<boost::asio::ssl::context> context, prometheus::Counter* counter,
                   Door door);

  std::unique_ptr<boost::asio::ssl::context> context_;
  prometheus::Counter* counter_;
  const Door door_;
  std::atomic<uint64_t> failures_{0};
  // When the last failure was logged (steady clock, ns; 0: never).
  std::atomic<int64_t> logged_at_ns_{0};
};

}  // namespace narwhal::server

#endif  // NARWHAL_SERVER_NET_TLS_CONTEXT_H_
