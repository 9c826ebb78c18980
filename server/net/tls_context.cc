#include "server/net/tls_context.h"

#include <openssl/ssl.h>
#include <prometheus/counter.h>
#include <prometheus/registry.h>

#include <boost/asio/buffer.hpp>
#include <boost/asio/ssl/context.hpp>
#include <chrono>
#include <string>
#include <utility>

#include "server/log.h"

namespace narwhal::server {
namespace {

namespace ssl = boost::asio::ssl;

constexpr auto kLogInterval = std::chrono::minutes(1);

// ALPN for the gRPC door: "h2" when the client offers it, else the
// handshake fails (gRPC is HTTP/2 only).
int SelectH2(SSL*, const unsigned char** out, unsigned char* outlen, const unsigned char* in,
             unsigned int inlen, void*) {
  static constexpr unsigned char kH2[] = {2, 'h', '2'};
  unsigned char* selected = nullptr;
  if (SSL_select_next_proto(&selected, outlen, kH2, sizeof(kH2), in, inlen) !=
      OPENSSL_NPN_NEGOTIATED) {
    return SSL_TLSEXT_ERR_ALERT_FATAL;
  }
  *out = selected;
  return SSL_TLSEXT_ERR_OK;
}

int64_t SteadyNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

absl::StatusOr<std::shared_ptr<TlsServerContext>> TlsServerContext::Create(
    const TlsPem& pem, prometheus::Registry* registry, Door door) {
  auto context = std::make_unique<ssl::context>(ssl::context::tls_server);
  boost::system::error_code ec;
  context->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                           ssl::context::no_sslv3 | ssl::context::no_tlsv1 |
                           ssl::context::no_tlsv1_1 | ssl::context::no_compression |
                           ssl::context::single_dh_use,
                       ec);
  if (!ec && SSL_CTX_set_min_proto_version(context->native_handle(), TLS1_2_VERSION) != 1) {
    ec = boost::asio::error::invalid_argument;
  }
  if (!ec) context->use_certificate_chain(boost::asio::buffer(pem.cert_chain), ec);
  if (!ec) {
    context->use_private_key(boost::asio::buffer(pem.private_key), ssl::context::pem, ec);
  }
  if (!ec && SSL_CTX_check_private_key(context->native_handle()) != 1) {
    ec = boost::asio::error::invalid_argument;
  }
  if (ec) {
    return absl::InvalidArgumentError(std::string("cannot set up TLS for the ") +
                                      (door == Door::kGrpc ? "gRPC" : "HTTP") +
                                      " listener: " + ec.message());
  }
  if (door == Door::kGrpc) SSL_CTX_set_alpn_select_cb(context->native_handle(), SelectH2, nullptr);
  prometheus::Counter* counter = nullptr;
  if (registry != nullptr) {
    counter = &prometheus::BuildCounter()
                   .Name("narwhal_tls_handshake_failures_total")
                   .Help("Client connections whose TLS handshake failed or timed out, by door")
                   .Register(*registry)
                   .Add({{"door", door == Door::kGrpc ? "grpc" : "http"}});
  }
  return std::shared_ptr<TlsServerContext>(new TlsServerContext(std::move(context), counter, door));
}

TlsServerContext::TlsServerContext(std::unique_ptr<ssl::context> context,
                                   prometheus::Counter* counter, Door door)
    : context_(std::move(context)), counter_(counter), door_(door) {}

TlsServerContext::~TlsServerContext() = default;

void TlsServerContext::HandshakeFailed(std::string_view why) {
  const uint64_t failures = failures_.fetch_add(1, std::memory_order_relaxed) + 1;
  if (counter_ != nullptr) counter_->Increment();
  const int64_t now = SteadyNowNs();
  int64_t last = logged_at_ns_.load(std::memory_order_relaxed);
  const int64_t interval = std::chrono::nanoseconds(kLogInterval).count();
  if (last != 0 && now - last < interval) return;
  if (!logged_at_ns_.compare_exchange_strong(last, now, std::memory_order_relaxed)) return;
  LogWarning(std::string(door_ == Door::kGrpc ? "grpc" : "http") +
             ": TLS handshake failed: " + std::string(why) + " (" + std::to_string(failures) +
             " failed handshakes since start; at most one such line a minute)");
}

}  // namespace narwhal::server
