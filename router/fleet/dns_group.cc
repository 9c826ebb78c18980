#include "router/fleet/dns_group.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace narwhal::router {
namespace {

bool IsIidChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '-';
}

}  // namespace

std::string MemberEndpoint(std::string_view endpoint, std::string_view member_host) {
  const size_t colon = endpoint.rfind(':');
  if (endpoint.empty() || colon == std::string_view::npos) return std::string(endpoint);
  return absl::StrCat("tcp://", absl::string_view(member_host.data(), member_host.size()),
                      absl::string_view(endpoint.data() + colon, endpoint.size() - colon));
}

std::vector<DnsGroupMember> DnsGroupMembers(std::string_view group_iid, int port,
                                            const std::vector<std::string>& addresses) {
  std::vector<DnsGroupMember> members;
  members.reserve(addresses.size());
  const absl::string_view group(group_iid.data(), group_iid.size());
  for (const std::string& address : addresses) {
    std::string iid_address = address;
    for (char& c : iid_address) {
      if (!IsIidChar(c)) c = '-';
    }
    const bool v6 = address.find(':') != std::string::npos;
    DnsGroupMember member;
    member.iid = absl::StrCat(group, "-", iid_address, "-", port);
    member.host = v6 ? absl::StrCat("[", address, "]") : address;
    member.url = absl::StrCat("http://", member.host, ":", port);
    members.push_back(std::move(member));
  }
  return members;
}

}  // namespace narwhal::router
