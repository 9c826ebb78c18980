// CaresLookup: one A + AAAA lookup of one name on a c-ares channel of its
// own, driven by an Asio strand (the machinery behind CaresResolver; see
// router/fleet/cares_resolver.h for the contract seen from outside).
//
// c-ares 1.18 has no event thread: the lookup watches the channel's sockets
// (told by c-ares's socket-state callback) with Asio descriptor waits and
// feeds readiness to ares_process_fd(); a steady timer follows
// ares_timeout() for c-ares's retransmissions, and a second one bounds the
// whole lookup. A channel per lookup makes a timeout or a cancel end exactly
// one lookup (c-ares 1.18 can cancel only a whole channel) and keeps
// lookups from sharing any state.
//
// Not thread-safe: create it, Start() it and Cancel() it on `strand` (an
// executor that runs one handler at a time); every handler runs there.
// Ownership: once started, its pending waits own it (the deadline's wait is
// pending until it is done), so it lives until its last wait has ended;
// others keep weak_ptrs. Destroying it (when its
// io_context is destroyed with the lookup pending) drops `done` unrun.
#ifndef NARWHAL_ROUTER_FLEET_CARES_LOOKUP_H_
#define NARWHAL_ROUTER_FLEET_CARES_LOOKUP_H_

#include <memory>
#include <string>

#include <absl/functional/any_invocable.h>

#include "engines/clock.h"
#include "router/fleet/dns_resolver.h"

namespace narwhal::router {

struct CaresLookupOptions {
  // The servers in c-ares's syntax ("ADDR:PORT,[V6]:PORT"), already
  // validated; empty = the system's /etc/resolv.conf (its servers, search
  // list and ndots apply; with servers given the name is looked up as is).
  std::string servers_csv = {};
  // The system resolver's configuration file (servers_csv empty); empty =
  // c-ares's default, /etc/resolv.conf.
  std::string resolv_conf = {};
  // The port of the servers resolv_conf names (the file carries none).
  int resolv_conf_port = 53;
  // How errors name the servers ("127.0.0.1:5353", "the system resolver").
  std::string servers_label = "the system resolver";
  // With one server, its SERVFAIL/REFUSED answer ends the lookup and is
  // reported as such; with several, c-ares tries the next one.
  bool single_server = false;
};

class CaresLookup {
 public:
  using Done = absl::AnyInvocable<void(DnsAnswer)>;

  virtual ~CaresLookup() = default;

  // A lookup of `name` (already checked with CheckDnsName) that has not
  // started. `done` runs once on `strand` with the answer, possibly inside
  // Start() or Cancel().
  static std::shared_ptr<CaresLookup> Create(const engines::Executor& strand,
                                             const CaresLookupOptions& options, std::string name,
                                             double timeout_s, Done done);

  // Sends the queries and arms the deadline.
  virtual void Start() = 0;
  // Ends the lookup now with a kFailed answer saying `why`; no-op once done.
  virtual void Cancel(std::string why) = 0;
};

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_FLEET_CARES_LOOKUP_H_
