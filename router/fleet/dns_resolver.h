// DnsResolver: the port through which DNS groups (B24) learn their members.
//
// One Resolve() asks for the A and AAAA records of a name and sorts the
// outcome into three kinds, because the fleet acts differently on each:
//   kAddresses - at least one address: the group's members are exactly
//                these (every A and AAAA address, textual, deduplicated,
//                sorted: IPv4 before IPv6, each in numeric order; IPv6
//                without brackets).
//   kNoAddress - the name does not exist (NXDOMAIN) or has no A/AAAA record
//                (NODATA): the group has no members. `error` says which.
//   kFailed    - no usable answer (timeout, SERVFAIL, REFUSED, connection
//                refused, no resolver, a bad name, an answer over the
//                bounds below): the group keeps its members. `error` is one
//                line naming the name and the cause.
// An answer is all or nothing: when the A lookup succeeds and the AAAA one
// fails (or the other way round), the answer is kFailed, never a partial
// list that would make half a group leave.
//
// The implementation is CaresResolver (router/fleet/cares_resolver.h); tests
// of the fleet can script their own.
#ifndef NARWHAL_ROUTER_FLEET_DNS_RESOLVER_H_
#define NARWHAL_ROUTER_FLEET_DNS_RESOLVER_H_

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "engines/engine_client.h"

namespace narwhal::router {

// An answer with more distinct addresses than this is kFailed (a group of
// 1,024 engines is far beyond any deployment; more is a misconfigured or
// hostile answer).
inline constexpr size_t kMaxDnsAddresses = 1024;
// The longest name accepted (RFC 1035's 255-byte wire limit as text,
// without a trailing dot).
inline constexpr size_t kMaxDnsNameBytes = 253;

struct DnsAnswer {
  enum class Kind { kAddresses, kNoAddress, kFailed };
  Kind kind = Kind::kFailed;
  std::vector<std::string> addresses;
  std::string error;

  static DnsAnswer Addresses(std::vector<std::string> addresses);
  static DnsAnswer NoAddress(std::string why);
  static DnsAnswer Failed(std::string why);
};

std::string_view DnsAnswerKindName(DnsAnswer::Kind kind);

// Empty when `name` may be looked up; otherwise why not. A name is 1 to 253
// bytes (one trailing dot allowed besides) of dot-separated labels of 1 to
// 63 letters, digits, '-' or '_'.
std::string CheckDnsName(std::string_view name);

class DnsResolver {
 public:
  virtual ~DnsResolver() = default;
  // A and AAAA of `name` within `timeout_s`; runs on the awaiting
  // coroutine's executor; never blocks it. Never throws: every failure is a
  // kFailed answer.
  virtual engines::Awaitable<DnsAnswer> Resolve(std::string name, double timeout_s) = 0;
};

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_FLEET_DNS_RESOLVER_H_
