// The members of a DNS group (B24): one engine per address of the group's
// name, all with the group entry's role and kv_engine_id.
#ifndef NARWHAL_ROUTER_FLEET_DNS_GROUP_H_
#define NARWHAL_ROUTER_FLEET_DNS_GROUP_H_

#include <string>
#include <string_view>
#include <vector>

namespace narwhal::router {

// `endpoint` ("tcp://HOST:PORT", or "") with a member's host instead of HOST:
// a DNS group's KV-event endpoints name each member at its own address.
std::string MemberEndpoint(std::string_view endpoint, std::string_view member_host);

struct DnsGroupMember {
  std::string iid;  // "<group iid>-<ADDR>-<PORT>"
  std::string url;  // "http://ADDR:PORT", an IPv6 ADDR in brackets
  std::string host;  // ADDR, an IPv6 ADDR in brackets

  friend bool operator==(const DnsGroupMember&, const DnsGroupMember&) = default;
};

// One member per address, in the order of `addresses` (a DnsAnswer's
// addresses: textual IPv4 or IPv6, without brackets). In the iid every
// character of the address outside [A-Za-z0-9.-] becomes '-' (so
// "fd00::1" gives "fd00--1"); the group iid is kept as configured (the
// config already restricts it to [A-Za-z0-9._-]).
std::vector<DnsGroupMember> DnsGroupMembers(std::string_view group_iid, int port,
                                            const std::vector<std::string>& addresses);

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_FLEET_DNS_GROUP_H_
