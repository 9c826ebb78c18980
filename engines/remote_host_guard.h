// Which hosts a KV handoff descriptor may not name when the router forwards
// its `remote_host` unchanged (handoff.remote_host: pass).
//
// A consumer engine connects to the descriptor's remote_host:remote_port to
// pull the KV blocks (NIXL's side channel). Under `pass` that host comes
// from the producer's answer, so a compromised or misconfigured producer
// could point every consumer at any address the consumers can reach. The
// addresses no NIXL producer ever advertises and that reach what must not
// be reached are refused:
//   - unspecified: 0.0.0.0/8 ("this network"), ::
//   - link-local: 169.254.0.0/16, fe80::/10 — where cloud instance metadata
//     services live
//   - cloud metadata: 169.254.169.254, 100.100.100.200, fd00:ec2::254, and
//     the names metadata, metadata.google.internal, metadata.goog,
//     instance-data, instance-data.ec2.internal
// IPv4 addresses are read as the C library reads them (inet_aton: "1",
// "2852039166", "0xa9.0xfe.0xa9.0xfe" are addresses too), IPv6 ones with or
// without brackets and zone, IPv4-mapped, -compatible and NAT64 (64:ff9b::/96)
// forms by their embedded IPv4 address; a trailing dot and letter case do not
// matter. A host name is not resolved: a name that resolves to such an
// address is not caught here (`match` or `rewrite` give that guarantee).
// Loopback stays allowed: a vLLM producer without VLLM_NIXL_SIDE_CHANNEL_HOST
// advertises localhost, which single-host fleets rely on.
//
// Pure function; thread-safe.
#ifndef NARWHAL_ENGINES_REMOTE_HOST_GUARD_H_
#define NARWHAL_ENGINES_REMOTE_HOST_GUARD_H_

#include <string_view>

namespace narwhal::engines {

// "" when `host` may be forwarded; else what it is ("an unspecified
// address", "a link-local address", "a cloud metadata address", "a cloud
// metadata host name").
std::string_view ForbiddenRemoteHostKind(std::string_view host);

}  // namespace narwhal::engines

#endif  // NARWHAL_ENGINES_REMOTE_HOST_GUARD_H_
