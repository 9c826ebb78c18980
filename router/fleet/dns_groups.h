// DnsGroups: the fleet's DNS groups (SPEC §13, B24). Each `engines[]` entry
// with `dns` and `port` (a Kubernetes headless Service, say) is resolved at
// start and every discovery.dns_refresh_s; its members are the fleet's
// `dns:<group iid>` source (Fleet::Reconcile): new addresses join (B22),
// vanished ones leave (B23). A failed lookup (timeout, SERVFAIL, no
// resolver) changes nothing and is logged once per episode; an answer with
// no address (NXDOMAIN, NODATA) removes the group's members. Every lookup is
// counted in narwhal_discovery_lookups_total{group,result} (ok, empty,
// failed).
//
// Runs as one coroutine on an event loop (the resolver is asynchronous, so
// a slow or dead DNS server never holds a thread). Thread-safe: SetGroups
// may be called from any thread (a reload).
#ifndef NARWHAL_ROUTER_FLEET_DNS_GROUPS_H_
#define NARWHAL_ROUTER_FLEET_DNS_GROUPS_H_

#include <absl/status/statusor.h>

#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "router/common/clock.h"
#include "router/common/metrics.h"
#include "router/common/settings.h"
#include "router/fleet/dns_resolver.h"
#include "router/fleet/fleet_admin.h"

namespace narwhal::router {

class DnsGroups {
 public:
  // Makes a resolver for the servers ("ADDR:PORT"; empty = the system's) on
  // the groups' executor.
  using ResolverFactory = std::function<absl::StatusOr<std::unique_ptr<DnsResolver>>(
      const std::vector<std::string>& servers)>;

  // `metrics` may be null.
  DnsGroups(FleetAdmin& fleet, const Clock& clock, Metrics* metrics, engines::Executor executor,
            ResolverFactory resolvers);
  ~DnsGroups();  // Stop()
  DnsGroups(const DnsGroups&) = delete;
  DnsGroups& operator=(const DnsGroups&) = delete;

  // The groups of the settings in force (their `engines[]` entries with
  // `dns`) and how to resolve them. A group no longer named leaves with its
  // members at the next refresh; a changed server list makes a new
  // resolver. The first call resolves at once.
  void SetGroups(const Settings& settings);

  // Starts the refresh loop on the executor; Stop() ends it and waits (call
  // it from a thread that runs no event loop, while the loop still runs).
  void Start();
  void Stop();

 private:
  struct Group {
    EngineSettings entry;
    bool failing = false;  // the current episode of failed lookups was logged
  };
  engines::Awaitable<void> Loop();
  engines::Awaitable<void> Refresh();
  void Count(const std::string& group, const char* result);

  FleetAdmin& fleet_;
  const Clock& clock_;
  Metrics* metrics_;
  engines::Executor executor_;
  ResolverFactory resolvers_;

  std::mutex mu_;
  std::map<std::string, Group> groups_;  // by group iid
  std::vector<std::string> gone_;        // groups to empty at the next refresh
  std::vector<std::string> servers_;
  bool servers_changed_ = true;
  double refresh_s_ = 5;
  double timeout_s_ = 2;
  bool stop_ = false;
  std::shared_ptr<engines::Timer> timer_;  // the loop's, while it waits
  std::unique_ptr<DnsResolver> resolver_;  // the loop's
  std::promise<void> ended_;
  bool started_ = false;
};

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_FLEET_DNS_GROUPS_H_
