// Options of the HTTP engine adapter (engines/http/beast_engine_client.h).
#ifndef NARWHAL_ENGINES_HTTP_HTTP_OPTIONS_H_
#define NARWHAL_ENGINES_HTTP_HTTP_OPTIONS_H_

#include <cstddef>
#include <string>

#include "engines/descriptor_contract.h"

namespace narwhal::engines {

// TLS to https:// engines (engines/http/tls_client.h). Certificates are
// always verified, and so is the server name; TLS 1.2 or later.
struct EngineTlsOptions {
  std::string ca_file;      // PEM CA bundle; empty = the system's default trust store
  std::string cert_file;    // PEM client certificate chain (mTLS); set with key_file
  std::string key_file;     // its PEM private key; set with cert_file
  std::string server_name;  // checked against the certificate and sent as SNI; empty = URL host
  friend bool operator==(const EngineTlsOptions&, const EngineTlsOptions&) = default;
};

struct HttpEngineClientOptions {
  double first_token_timeout_s = 2.5;  // B12
  double decode_read_timeout_s = 10;   // B13; 0 = request deadline bounds the stream
  double connect_timeout_s = 10;
  std::string connector = "NixlConnector";
  // What happens to a descriptor's remote_host (handoff.remote_host).
  RemoteHostPolicy remote_host_policy = RemoteHostPolicy::kPass;
  std::string api_key;  // Bearer token sent to engines; empty = none
  // Bounds on what is read from an engine; each one, exceeded, fails the leg
  // (kResponseBound) with a detail naming it, before the rest of the response
  // is read.
  // Largest non-streaming engine response body read (prefill and control
  // responses; Beast's body_limit, checked against Content-Length up front).
  size_t max_response_bytes = 16 * 1024 * 1024;
  // Largest response header block accepted from an engine (chunked trailers
  // count toward it too).
  size_t max_header_bytes = 64 * 1024;
  // Most header fields (plus trailer fields) accepted in one engine response.
  int max_header_fields = 100;
  // Largest SSE event of a decode stream (engines/http/sse_reader.h).
  size_t max_event_bytes = 16 * 1024 * 1024;
  // Idle keep-alive connections kept per engine on each event loop.
  size_t max_idle_connections = 256;
  EngineTlsOptions tls;
};

}  // namespace narwhal::engines

#endif  // NARWHAL_ENGINES_HTTP_HTTP_OPTIONS_H_
