#include "server/client_request_id.h"

#include <algorithm>

#include "absl/strings/ascii.h"

namespace narwhal::server {

std::string SaneClientRequestId(std::string_view id) {
  if (id.empty() || id.size() > kMaxClientRequestIdBytes) return "";
  const bool sane = std::all_of(id.begin(), id.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
           std::string_view("-_.:~+/=@").find(c) != std::string_view::npos;
  });
  return sane ? std::string(id) : "";
}

}  // namespace narwhal::server
