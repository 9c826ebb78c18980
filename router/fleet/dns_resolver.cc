#include "router/fleet/dns_resolver.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"

namespace narwhal::router {
namespace {

// An address in the order answers are sorted by: family (IPv4 first), then
// the address bytes.
struct BinaryAddress {
  int family = AF_INET;
  std::array<uint8_t, 16> bytes{};

  friend bool operator<(const BinaryAddress& a, const BinaryAddress& b) {
    return std::tie(a.family, a.bytes) < std::tie(b.family, b.bytes);
  }
  friend bool operator==(const BinaryAddress& a, const BinaryAddress& b) {
    return a.family == b.family && a.bytes == b.bytes;
  }
};

bool Parse(const std::string& text, BinaryAddress* out) {
  if (inet_pton(AF_INET, text.c_str(), out->bytes.data()) == 1) {
    out->family = AF_INET;
    return true;
  }
  if (inet_pton(AF_INET6, text.c_str(), out->bytes.data()) == 1) {
    out->family = AF_INET6;
    return true;
  }
  return false;
}

std::string Format(const BinaryAddress& address) {
  char text[INET6_ADDRSTRLEN] = {};
  inet_ntop(address.family, address.bytes.data(), text, sizeof(text));
  return text;
}

bool IsLabelChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_';
}

}  // namespace

DnsAnswer DnsAnswer::Addresses(std::vector<std::string> addresses) {
  std::vector<BinaryAddress> parsed;
  parsed.reserve(addresses.size());
  for (const std::string& text : addresses) {
    BinaryAddress address;
    if (!Parse(text, &address)) {
      return Failed(absl::StrCat("the answer holds \"", text, "\", which is not an IP address"));
    }
    parsed.push_back(address);
  }
  std::sort(parsed.begin(), parsed.end());
  parsed.erase(std::unique(parsed.begin(), parsed.end()), parsed.end());
  if (parsed.size() > kMaxDnsAddresses) {
    return Failed(absl::StrCat("the answer has ", parsed.size(), " addresses, more than the ",
                               kMaxDnsAddresses, " a group may have"));
  }
  if (parsed.empty()) return NoAddress("the answer has no address");
  DnsAnswer answer;
  answer.kind = Kind::kAddresses;
  answer.addresses.reserve(parsed.size());
  for (const BinaryAddress& address : parsed) answer.addresses.push_back(Format(address));
  return answer;
}

DnsAnswer DnsAnswer::NoAddress(std::string why) {
  DnsAnswer answer;
  answer.kind = Kind::kNoAddress;
  answer.error = std::move(why);
  return answer;
}

DnsAnswer DnsAnswer::Failed(std::string why) {
  DnsAnswer answer;
  answer.kind = Kind::kFailed;
  answer.error = std::move(why);
  return answer;
}

std::string_view DnsAnswerKindName(DnsAnswer::Kind kind) {
  switch (kind) {
    case DnsAnswer::Kind::kAddresses:
      return "addresses";
    case DnsAnswer::Kind::kNoAddress:
      return "no_address";
    case DnsAnswer::Kind::kFailed:
      return "failed";
  }
  return "failed";
}

std::string CheckDnsName(std::string_view name) {
  std::string_view body = name;
  if (!body.empty() && body.back() == '.') body.remove_suffix(1);
  if (body.empty()) return "the name is empty";
  if (body.size() > kMaxDnsNameBytes) {
    return absl::StrCat("the name is ", body.size(), " bytes long, more than ", kMaxDnsNameBytes);
  }
  size_t label = 0;
  for (size_t i = 0; i <= body.size(); ++i) {
    if (i == body.size() || body[i] == '.') {
      if (label == 0) return "the name has an empty label";
      if (label > 63) return "the name has a label longer than 63 bytes";
      label = 0;
      continue;
    }
    if (!IsLabelChar(body[i])) {
      return "the name may hold only letters, digits, '-', '_' and dots";
    }
    ++label;
  }
  return "";
}

}  // namespace narwhal::router
