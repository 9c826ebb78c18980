// CaresResolver: the DnsResolver of narwhal-serve, on c-ares and an Asio
// executor (c-ares 1.18, Debian bookworm's, has no thread of its own).
//
//   auto resolver = CaresResolver::Create(loop_executor, {.servers = {"10.96.0.10:53"}});
//   DnsAnswer answer = co_await (*resolver)->Resolve("vllm.llm.svc.cluster.local", 2.0);
//
// Servers are "ADDR:PORT" or "[IPV6]:PORT" (a bare address means port 53);
// an empty list means the system resolver: /etc/resolv.conf's servers,
// search list and ndots, read afresh by every lookup. With servers given,
// the name is looked up as is. /etc/hosts is never read: a DNS group names
// DNS records.
//
// Every lookup runs on a strand of the executor given to Create(): its
// sockets are watched there and nothing ever blocks a thread. The answer is
// handed to the awaiting coroutine on its own executor. Bounds: names of at
// most 253 bytes (CheckDnsName), answers of at most kMaxDnsAddresses, at
// most kMaxLookupsInFlight lookups at once (more fail at once), timeouts
// clamped to (0, 3600] s. Lookups of the same name are independent.
//
// Thread-safe: Resolve() may be called from any coroutine on any executor.
// Destroying the resolver ends every lookup in flight with a kFailed answer
// ("resolver shut down") delivered to its coroutine; destroy it while the
// executor's io_context still exists. When that io_context is destroyed with
// lookups pending (stopped first), they are freed without resuming their
// coroutines. Answers are posted from the resolver's executor to the
// awaiting coroutines' executors: stop the resolver's threads before
// destroying an io_context that coroutines awaiting it run on.
#ifndef NARWHAL_ROUTER_FLEET_CARES_RESOLVER_H_
#define NARWHAL_ROUTER_FLEET_CARES_RESOLVER_H_

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engines/clock.h"
#include "router/fleet/dns_resolver.h"

namespace narwhal::router {

inline constexpr size_t kMaxLookupsInFlight = 256;

struct CaresResolverOptions {
  // "ADDR:PORT" or "[IPV6]:PORT" each; empty = the system resolver.
  std::vector<std::string> servers = {};
  // The system resolver's configuration; empty = /etc/resolv.conf. Tests
  // point it at a file of their own.
  std::string resolv_conf = {};
  // The port of the servers that file names (resolv.conf carries none).
  int resolv_conf_port = 53;
};

class CaresResolver final : public DnsResolver {
 public:
  // InvalidArgument when a server is not an IP address with an optional
  // port (or resolv_conf_port is not a port); Internal when c-ares cannot
  // be set up.
  static absl::StatusOr<std::unique_ptr<CaresResolver>> Create(const engines::Executor& executor,
                                                               CaresResolverOptions options);

  ~CaresResolver() override;
  CaresResolver(const CaresResolver&) = delete;
  CaresResolver& operator=(const CaresResolver&) = delete;

  engines::Awaitable<DnsAnswer> Resolve(std::string name, double timeout_s) override;

 private:
  struct Core;
  explicit CaresResolver(std::shared_ptr<Core> core) : core_(std::move(core)) {}

  std::shared_ptr<Core> core_;
};

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_FLEET_CARES_RESOLVER_H_
