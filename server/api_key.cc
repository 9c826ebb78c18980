#include "server/api_key.h"

#include <algorithm>
#include <cstddef>

namespace narwhal::server {

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  const size_t n = std::max(a.size(), b.size());
  // Volatile so the compiler cannot stop the loop at the first difference.
  volatile unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    // Past its end a string reads as 0; the length check above has already
    // made such a pair unequal.
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff = diff | static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

bool BearerMatches(std::string_view authorization, std::string_view key) {
  // Surrounding whitespace is not part of a field value (RFC 9110 §5.5): the
  // HTTP parser has dropped it already, gRPC metadata still carries it.
  while (!authorization.empty() && (authorization.front() == ' ' || authorization.front() == '\t')) {
    authorization.remove_prefix(1);
  }
  while (!authorization.empty() && (authorization.back() == ' ' || authorization.back() == '\t')) {
    authorization.remove_suffix(1);
  }
  constexpr std::string_view kScheme = "Bearer ";
  // The scheme is not secret: checking it first leaks nothing about the key.
  const bool scheme = authorization.substr(0, kScheme.size()) == kScheme;
  const std::string_view presented = scheme ? authorization.substr(kScheme.size()) : authorization;
  const bool same = ConstantTimeEquals(presented, key);
  return scheme && same && !key.empty();
}

}  // namespace narwhal::server
