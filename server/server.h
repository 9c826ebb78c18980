// Server: narwhal-serve's process as one object (SPEC §2) — the fleet and
// its checks, the router, both doors, the admin service, the probes and
// reloads — that main() starts and stops, and that tests start in-process.
//
// Create() starts everything and binds every listener; Reload() is what
// SIGHUP does; Shutdown() is the graceful drain of SIGTERM. Signals stay
// with main(): a Server neither blocks nor takes any.
#ifndef NARWHAL_SERVER_SERVER_H_
#define NARWHAL_SERVER_SERVER_H_

#include <absl/status/statusor.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace narwhal::server {

struct ServerOptions {
  // The fleet config file (read again on every reload); empty serves the
  // embedded simulated fleet.
  std::string config;
  // Listener addresses (HOST:PORT, port 0 picks one) that win over the
  // file's listen.*, at start and at every reload; empty keeps the file's.
  std::string http, grpc, admin, health;
  std::string journal;     // the journal file; empty: no journal
  std::string access_log;  // a path or "-" (stdout); empty: no access log
  // Run the mesh preflight (B18) before any listener is bound, after
  // waiting up to preflight_wait_s for engines still loading.
  bool preflight = false;
  double preflight_wait_s = 0;
  // The preflight's wait between looks at the engines: waits up to the
  // given seconds and says whether to go on (false: interrupted, not
  // serving). Default: sleeps.
  std::function<bool(double)> keep_waiting;
};

// Where the listeners are (the bound ports, not the asked-for ones).
struct ServerAddresses {
  std::string http_host;
  int http_port = 0;
  std::string grpc_host;
  int grpc_port = 0;
  std::string admin_host;
  int admin_port = 0;
  std::string health;  // "HOST:PORT", or "" without a probe listener
};

class Server {
 public:
  // A serving router, or why there is none (the message is what the
  // process logs before it exits 1): a config, file or listener that cannot
  // be used, or a failed preflight. kCancelled: the preflight's wait was
  // interrupted (the process exits 0).
  static absl::StatusOr<std::unique_ptr<Server>> Create(ServerOptions options);
  // Shuts down first if Shutdown() was not called.
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  const ServerAddresses& addresses() const;
  std::string model() const;

  // Reads the config file again (B20) and applies it whole or rejects it
  // with the key path; `why` names the trigger in the log. Without a config
  // file (the embedded fleet) there is nothing to reload.
  void Reload(std::string_view why);

  // The graceful drain (SPEC §2): new requests refused (503) while admitted
  // ones finish, streams included, for up to serving.graceful_timeout_s of
  // the configuration in force; then the rest are cut and every listener
  // closes. `why` names the trigger in the log. Returns the requests cut.
  // Only the first call drains; later ones return 0.
  size_t Shutdown(std::string_view why);

 private:
  struct Parts;
  explicit Server(std::unique_ptr<Parts> parts);

  std::unique_ptr<Parts> parts_;
  bool stopped_ = false;
};

}  // namespace narwhal::server

#endif  // NARWHAL_SERVER_SERVER_H_
