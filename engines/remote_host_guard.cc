#include "engines/remote_host_guard.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <array>
#include <cctype>
#include <cstdint>
#include <cstring>
#include <string>

namespace narwhal::engines {
namespace {

constexpr std::string_view kUnspecified = "an unspecified address";
constexpr std::string_view kLinkLocal = "a link-local address";
constexpr std::string_view kMetadata = "a cloud metadata address";
constexpr std::string_view kMetadataName = "a cloud metadata host name";

constexpr std::array<std::string_view, 5> kMetadataNames = {
    "metadata", "metadata.google.internal", "metadata.goog", "instance-data",
    "instance-data.ec2.internal"};

// `a` in host byte order.
std::string_view Ipv4Kind(uint32_t a) {
  if ((a >> 24) == 0) return kUnspecified;                   // 0.0.0.0/8
  if (a == 0xA9FEA9FEu || a == 0x646464C8u) return kMetadata;  // 169.254.169.254, 100.100.100.200
  if ((a >> 16) == 0xA9FEu) return kLinkLocal;               // 169.254.0.0/16
  return "";
}

uint32_t Ipv4At(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

std::string_view Ipv6Kind(const unsigned char (&b)[16]) {
  static constexpr unsigned char kZero[16] = {};
  static constexpr unsigned char kAwsMetadata[16] = {0xfd, 0x00, 0x0e, 0xc2, 0, 0, 0, 0,
                                                     0,    0,    0,    0,    0, 0, 0x02, 0x54};
  static constexpr unsigned char kLoopback[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  if (std::memcmp(b, kZero, 16) == 0) return kUnspecified;
  if (std::memcmp(b, kLoopback, 16) == 0) return "";
  if (std::memcmp(b, kAwsMetadata, 16) == 0) return kMetadata;
  if (b[0] == 0xfe && (b[1] & 0xc0) == 0x80) return kLinkLocal;  // fe80::/10
  // An IPv4 address inside: mapped (::ffff:a.b.c.d), compatible (::a.b.c.d)
  // or NAT64 (64:ff9b::a.b.c.d).
  static constexpr unsigned char kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  static constexpr unsigned char kNat64[12] = {0, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0};
  if (std::memcmp(b, kMapped, 12) == 0 || std::memcmp(b, kZero, 12) == 0 ||
      std::memcmp(b, kNat64, 12) == 0) {
    return Ipv4Kind(Ipv4At(b + 12));
  }
  return "";
}

}  // namespace

std::string_view ForbiddenRemoteHostKind(std::string_view host) {
  std::string h(host);
  // What a C resolver would read: the bytes before any NUL.
  if (const size_t nul = h.find('\0'); nul != std::string::npos) h.resize(nul);
  for (char& c : h) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  if (const size_t zone = h.find('%'); zone != std::string::npos) h.resize(zone);
  if (!h.empty() && h.back() == '.') h.pop_back();
  if (h.empty()) return "";
  for (std::string_view name : kMetadataNames) {
    if (h == name) return kMetadataName;
  }
  in_addr v4{};
  if (inet_aton(h.c_str(), &v4) != 0) return Ipv4Kind(ntohl(v4.s_addr));
  unsigned char v6[16];
  if (inet_pton(AF_INET6, h.c_str(), v6) == 1) return Ipv6Kind(v6);
  return "";
}

}  // namespace narwhal::engines
