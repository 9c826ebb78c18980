// Comparison of client credentials (SPEC §12): the API key both inference
// doors require when serving.api_key_env is set.
//
// The comparison takes time that depends only on the lengths of its inputs,
// never on where they first differ, so a client cannot find the key one
// byte at a time by timing refusals. A length mismatch is folded into the
// result rather than returned early. Pure functions; thread-safe.
#ifndef NARWHAL_SERVER_API_KEY_H_
#define NARWHAL_SERVER_API_KEY_H_

#include <string_view>

namespace narwhal::server {

// True when `a` and `b` are the same bytes. Every byte of the longer one is
// read whatever the contents.
bool ConstantTimeEquals(std::string_view a, std::string_view b);

// True when `authorization` (the client's Authorization header, or the
// gRPC `authorization` metadata value), without the spaces and tabs around
// it, is exactly "Bearer <key>". Both doors apply this one rule: surrounding
// whitespace is not part of an HTTP field value (RFC 9110 §5.5), which the
// HTTP parser drops and gRPC metadata keeps, so it is dropped here too;
// inside, nothing is trimmed or folded ("Bearer  <key>", "bearer <key>" and
// "<key> " inside the value do not match). `key` must not be empty (an empty
// key means no authentication: callers do not ask).
bool BearerMatches(std::string_view authorization, std::string_view key);

}  // namespace narwhal::server

#endif  // NARWHAL_SERVER_API_KEY_H_
