#include "router/fleet/cares_resolver.h"

#include <ares.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>

#include <boost/asio/async_result.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "router/fleet/cares_lookup.h"

namespace narwhal::router {
namespace {

namespace asio = boost::asio;

constexpr double kMaxTimeoutS = 3600;

// c-ares asks for one library initialisation per process before any
// channel (a no-op on Linux since 1.7, but the documented contract).
int InitCaresOnce() {
  static const int status = ares_library_init(ARES_LIB_INIT_ALL);
  return status;
}

// Checks the servers with c-ares's own parser and counts them; no servers =
// counts the system resolver's.
absl::StatusOr<int> CheckServers(const CaresResolverOptions& config) {
  const std::vector<std::string>& servers = config.servers;
  ares_channel probe = nullptr;
  ares_options options = {};
  int mask = 0;
  if (!config.resolv_conf.empty()) {
    options.resolvconf_path = const_cast<char*>(config.resolv_conf.c_str());
    mask |= ARES_OPT_RESOLVCONF;
  }
  if (int status = ares_init_options(&probe, &options, mask); status != ARES_SUCCESS) {
    return absl::InternalError(absl::StrCat("cannot set up c-ares: ", ares_strerror(status)));
  }
  absl::Status result;
  for (const std::string& server : servers) {
    const bool plain = !server.empty() && server.find_first_of(", \t\n") == std::string::npos;
    if (!plain || ares_set_servers_ports_csv(probe, server.c_str()) != ARES_SUCCESS) {
      result = absl::InvalidArgumentError(absl::StrCat(
          "DNS server \"", server, "\" is not an IP address with an optional port "
          "(ADDR:PORT or [IPV6]:PORT)"));
      break;
    }
  }
  int count = 0;
  if (result.ok()) {
    if (!servers.empty()) {
      ares_set_servers_ports_csv(probe, absl::StrJoin(servers, ",").c_str());
    }
    ares_addr_port_node* list = nullptr;
    if (ares_get_servers_ports(probe, &list) == ARES_SUCCESS) {
      for (const ares_addr_port_node* node = list; node != nullptr; node = node->next) ++count;
      ares_free_data(list);
    }
  }
  ares_destroy(probe);
  if (!result.ok()) return result;
  return count;
}

}  // namespace

// Shared by the resolver and the work it posts, so that a lookup finishing
// after the resolver is gone touches nothing freed.
struct CaresResolver::Core {
  Core(engines::Executor strand_in, CaresLookupOptions options_in)
      : strand(std::move(strand_in)), options(std::move(options_in)) {}

  // On the strand.
  void Begin(const std::shared_ptr<Core>& self, std::string name, double timeout_s,
             CaresLookup::Done deliver) {
    if (closed) {
      deliver(DnsAnswer::Failed(absl::StrCat(name, ": resolver shut down")));
      return;
    }
    if (live.size() >= kMaxLookupsInFlight) {
      deliver(DnsAnswer::Failed(absl::StrCat(name, ": ", kMaxLookupsInFlight,
                                             " lookups are already in flight")));
      return;
    }
    const uint64_t id = next_id++;
    std::weak_ptr<Core> weak = self;
    auto lookup = CaresLookup::Create(
        strand, options, std::move(name), timeout_s,
        [weak, id, deliver = std::move(deliver)](DnsAnswer answer) mutable {
          if (std::shared_ptr<Core> core = weak.lock()) core->live.erase(id);
          deliver(std::move(answer));
        });
    live.emplace(id, lookup);
    lookup->Start();  // from here on its pending waits keep it alive
  }

  // On the strand.
  void Shutdown() {
    closed = true;
    auto lookups = std::move(live);
    live.clear();
    for (auto& [id, weak] : lookups) {
      if (std::shared_ptr<CaresLookup> lookup = weak.lock()) lookup->Cancel("resolver shut down");
    }
  }

  const engines::Executor strand;
  const CaresLookupOptions options;
  // On the strand only. Lookups are owned by their own pending waits, not
  // here: the awaiting coroutine (which a lookup holds until it answers)
  // may hold the Core, and an io_context destroyed with lookups pending
  // must be able to free them.
  bool closed = false;
  uint64_t next_id = 0;
  absl::flat_hash_map<uint64_t, std::weak_ptr<CaresLookup>> live;
};

absl::StatusOr<std::unique_ptr<CaresResolver>> CaresResolver::Create(
    const engines::Executor& executor, CaresResolverOptions config) {
  if (int status = InitCaresOnce(); status != ARES_SUCCESS) {
    return absl::InternalError(absl::StrCat("cannot initialise c-ares: ", ares_strerror(status)));
  }
  if (config.resolv_conf_port < 1 || config.resolv_conf_port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("resolv_conf_port ", config.resolv_conf_port, " is not a port"));
  }
  absl::StatusOr<int> count = CheckServers(config);
  if (!count.ok()) return count.status();
  CaresLookupOptions options;
  options.servers_csv = absl::StrJoin(config.servers, ",");
  options.resolv_conf = config.resolv_conf;
  options.resolv_conf_port = config.resolv_conf_port;
  const std::string conf = config.resolv_conf.empty() ? "/etc/resolv.conf" : config.resolv_conf;
  options.servers_label = config.servers.empty()
                              ? absl::StrCat("the system resolver (", conf, ")")
                              : absl::StrJoin(config.servers, ", ");
  options.single_server = *count == 1;
  auto core = std::make_shared<Core>(asio::make_strand(executor), std::move(options));
  return std::unique_ptr<CaresResolver>(new CaresResolver(std::move(core)));
}

CaresResolver::~CaresResolver() {
  asio::dispatch(core_->strand, [core = core_] { core->Shutdown(); });
}

engines::Awaitable<DnsAnswer> CaresResolver::Resolve(std::string name, double timeout_s) {
  if (std::string why = CheckDnsName(name); !why.empty()) {
    co_return DnsAnswer::Failed(absl::StrCat(name.substr(0, 64), name.size() > 64 ? "..." : "",
                                             ": ", why));
  }
  if (!(timeout_s > 0)) {
    co_return DnsAnswer::Failed(absl::StrCat(name, ": the lookup timeout must be positive"));
  }
  timeout_s = std::min(timeout_s, kMaxTimeoutS);
  // The initiation lives in the awaiting coroutine's frame until the answer
  // comes, and the lookup holds that coroutine: it holds the Core weakly.
  auto initiate = [weak = std::weak_ptr<Core>(core_)](auto handler, std::string name,
                                                       double timeout_s) {
    std::shared_ptr<Core> core = weak.lock();
    // The answer resumes the coroutine on its own executor, which is kept
    // busy meanwhile.
    auto work = asio::make_work_guard(asio::get_associated_executor(handler));
    CaresLookup::Done deliver = [handler = std::move(handler),
                                 work = std::move(work)](DnsAnswer answer) mutable {
      asio::post(work.get_executor(),
                 [handler = std::move(handler), answer = std::move(answer)]() mutable {
                   std::move(handler)(std::move(answer));
                 });
      work.reset();
    };
    if (core == nullptr) {
      deliver(DnsAnswer::Failed(absl::StrCat(name, ": resolver shut down")));
      return;
    }
    asio::dispatch(core->strand, [core, name = std::move(name), timeout_s,
                                  deliver = std::move(deliver)]() mutable {
      core->Begin(core, std::move(name), timeout_s, std::move(deliver));
    });
  };
  co_return co_await asio::async_initiate<const asio::use_awaitable_t<>&, void(DnsAnswer)>(
      std::move(initiate), asio::use_awaitable, std::move(name), timeout_s);
}

}  // namespace narwhal::router
