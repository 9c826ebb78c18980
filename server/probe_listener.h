// ProbeListener: the plaintext HTTP listener for health probes
// (listen.health), apart from the client doors.
//
// It answers GET /health, /ready and /serving and nothing else (404), never
// over TLS and never with request contents, so an orchestrator's probes work
// whatever tls.* says (a kubelet's gRPC probe cannot speak TLS) and never
// compete with clients for serving.max_connections:
//
//   /health   200 while the process runs: liveness.
//   /ready    200 while the fleet can serve (every role has an engine in
//             placement that passed a check), as the HTTP door's /ready.
//   /serving  200 while this router answers requests — with a result or
//             with 503 backend_unavailable and Retry-After when the fleet
//             cannot serve: readiness for a load balancer, which should keep
//             such a router rather than refuse connections. 200 from the
//             first time /ready is 200, at the latest from the end of the
//             start-up window (the time every engine's first start-up check
//             needs to answer or time out), so a new replica takes no traffic
//             before its first checks; 503 once the drain began.
//
// Connections run on the IoLoops under the HTTP door's connection code
// (server/http/connection.h) with small fixed limits. Thread-safe. The
// IoLoops must keep running until Stop() returned.
#ifndef NARWHAL_SERVER_PROBE_LISTENER_H_
#define NARWHAL_SERVER_PROBE_LISTENER_H_

#include <functional>
#include <memory>
#include <string>

#include <absl/status/statusor.h>

#include "engines/clock.h"
#include "engines/http/io_loops.h"

namespace narwhal::server {

class ProbeListener {
 public:
  // Whether the fleet can serve; `why` (may be null) gets the reason when not.
  using FleetReady = std::function<bool(std::string* why)>;

  // The start-up window begins now (clock.Now()).
  ProbeListener(const engines::Clock& clock, engines::IoLoops& loops, FleetReady fleet_ready,
                engines::MonoClock::duration startup_window);
  ~ProbeListener();  // Stop()
  ProbeListener(const ProbeListener&) = delete;
  ProbeListener& operator=(const ProbeListener&) = delete;

  // Binds `host:port` (port 0 picks a free port); returns the bound port.
  absl::StatusOr<int> Bind(const std::string& host, int port);
  // Starts accepting on the loops.
  void Start();
  // /ready and /serving answer 503 from now on (/health stays 200).
  void BeginDrain();
  // Closes the listener and every connection and waits for them. Never call
  // it on a loop thread.
  void Stop();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// The start-up window of ProbeListener for `settings`-like timeouts: an
// engine's first start-up check is answered or timed out within its connect
// bound plus its health bound.
engines::MonoClock::duration ProbeStartupWindow(double connect_timeout_s,
                                                double health_timeout_s);

}  // namespace narwhal::server

#endif  // NARWHAL_SERVER_PROBE_LISTENER_H_
