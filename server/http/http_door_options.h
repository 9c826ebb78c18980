// The limits of the HTTP front door (server/http/openai_shim), one value per door.
//
// Built from the fleet settings (serving.*) by HttpDoorOptionsFrom() — all
// but `tls`, which the caller sets from the files of `tls.*`; tests
// construct it directly to run the door with short timeouts. Every bound
// here exists so that no byte sequence and no pace of a client can make the
// door hold unbounded memory, a connection slot forever, or other clients'
// requests hostage (SPEC §12).
#ifndef NARWHAL_SERVER_HTTP_HTTP_DOOR_OPTIONS_H_
#define NARWHAL_SERVER_HTTP_HTTP_DOOR_OPTIONS_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "engines/api.h"
#include "router/common/settings.h"

namespace narwhal::server {

class TlsServerContext;

struct HttpDoorOptions {
  using Duration = engines::MonoClock::duration;

  // Open client connections; one more goes to the reserve below, and when
  // that is full too it is refused at once (a fixed 503 written without
  // waiting, then closed).
  int max_connections = 4096;
  // Connections beyond max_connections kept for probes and scrapes, so that
  // connections holding every slot (slow bodies, idle keep-alives) cannot
  // starve GET /health, /ready and /metrics: each carries one such request,
  // whose head and answer must be done within reserve_timeout of its
  // accept; any other request on it gets the fixed 503 of a connection
  // beyond the cap.
  int reserve_connections = 16;
  Duration reserve_timeout = std::chrono::seconds(2);
  // Request line plus header fields of one request (431 beyond).
  size_t max_header_bytes = 65536;
  // Header fields of one request (431 beyond).
  int max_headers = 100;
  // Body of one request, Content-Length or chunked (413 beyond; nothing past
  // the limit is buffered).
  uint64_t max_body_bytes = 4194304;
  // From a request's first byte to the end of its headers; on a new
  // connection also the wait for that first byte. Also the longest silence
  // while a body arrives.
  Duration header_timeout = std::chrono::seconds(10);
  // A body's whole read, from the end of its head: header_timeout plus one
  // second per min_body_bytes_per_s bytes of body received so far, so a body
  // that trickles in slower than that on average is cut, however it paces
  // its bytes; a 4 MiB body may take header_timeout + 64 s.
  uint64_t min_body_bytes_per_s = 64 * 1024;
  // And at most this, from the request's first byte (serving.request_timeout_s).
  Duration body_timeout = std::chrono::seconds(600);
  // An idle keep-alive connection between two requests.
  Duration keepalive_timeout = std::chrono::seconds(60);
  // Writing one response that is not a stream event (a stream's writes are
  // bounded by the deadline the router passes).
  Duration write_timeout = std::chrono::seconds(60);
  // After an error response that ends a connection whose request was not read
  // to its end, the door reads (and drops) what the client still sends for at
  // most this long and this many bytes before closing, so the client reads
  // the response instead of a reset.
  Duration linger_timeout = std::chrono::seconds(1);
  size_t linger_bytes = 1 << 20;
  // Null: plaintext. Else every connection first completes a TLS handshake
  // with this context, within header_timeout (server/net/tls_context.h).
  std::shared_ptr<TlsServerContext> tls;
};

inline HttpDoorOptions HttpDoorOptionsFrom(const router::Settings& settings) {
  const router::ServingSettings& s = settings.serving;
  HttpDoorOptions o;
  o.max_connections = s.max_connections;
  o.max_header_bytes = static_cast<size_t>(s.max_header_bytes);
  o.max_headers = s.max_headers;
  o.max_body_bytes = static_cast<uint64_t>(s.max_request_bytes);
  o.header_timeout = engines::FromSeconds(s.header_timeout_s);
  o.body_timeout = engines::FromSeconds(s.request_timeout_s);
  o.keepalive_timeout = engines::FromSeconds(s.keepalive_timeout_s);
  o.write_timeout = engines::FromSeconds(s.keepalive_timeout_s);
  return o;
}

}  // namespace narwhal::server

#endif  // NARWHAL_SERVER_HTTP_HTTP_DOOR_OPTIONS_H_
