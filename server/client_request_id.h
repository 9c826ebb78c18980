// The client's own request id (HTTP X-Request-Id, gRPC x-request-id
// metadata or GenerateRequest.request_id): kept only when it is sane — 1 to
// kMaxClientRequestIdBytes bytes of token characters (letters, digits and
// - _ . : ~ + / = @) — so that it can be echoed in a header, journaled as
// client_rid and carried in each engine leg's request id without escaping.
#ifndef NARWHAL_SERVER_CLIENT_REQUEST_ID_H_
#define NARWHAL_SERVER_CLIENT_REQUEST_ID_H_

#include <cstddef>
#include <string>
#include <string_view>

namespace narwhal::server {

inline constexpr size_t kMaxClientRequestIdBytes = 128;
// The header (HTTP) and metadata key (gRPC) that echo a sane client id; the
// router's own id stays in x-request-id.
inline constexpr char kClientRequestIdHeader[] = "x-client-request-id";

// `id` when sane, else "".
std::string SaneClientRequestId(std::string_view id);

}  // namespace narwhal::server

#endif  // NARWHAL_SERVER_CLIENT_REQUEST_ID_H_
