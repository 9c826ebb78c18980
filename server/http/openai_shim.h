// OpenAiShim: the HTTP front door (SPEC §4), event-driven on the IoLoops.
//
// Translates OpenAI-style HTTP requests into router::Request and runs each
// inside its client connection's coroutine (Router::Serve): status and
// headers are held until the first generated token; afterwards the decode
// events of each engine read are relayed as SSE events in one write, ending
// with `data: [DONE]` or, after a failure, one terminal error event (B16). A
// client that goes away — while its request is held or mid-stream — cancels
// its request (B19), seen by a read that watches the socket, never by
// polling. Also serves /v1/models, /health, /ready and /metrics.
//
// One listener; accepted connections are spread round-robin over the loops,
// each served by one coroutine (server/http/connection.h) under the limits
// of server/http/http_door_options.h: connection cap, header timeout and
// limits (431), body limit for either framing (413), keep-alive timeout,
// one framing per request (400). Requests the door refuses before the core
// are journaled through Router::RecordRefused.
//
// Beast and Asio stay inside server/http/ and the .cc. Thread-safe. The
// IoLoops must keep running until Join() returned (or the shim is destroyed).
#ifndef NARWHAL_SERVER_HTTP_OPENAI_SHIM_H_
#define NARWHAL_SERVER_HTTP_OPENAI_SHIM_H_

#include <absl/status/statusor.h>
#include <prometheus/registry.h>

#include <functional>
#include <memory>
#include <string>

#include "engines/clock.h"
#include "engines/http/io_loops.h"
#include "router/common/settings.h"
#include "router/fleet/fleet.h"
#include "router/router.h"
#include "server/http/http_door_options.h"

namespace narwhal::server {

class OpenAiShim {
 public:
  // `api_key` empty = no client authentication. Limits from `settings`.
  OpenAiShim(const router::Settings& settings, router::Router& router, router::Fleet& fleet,
             const engines::Clock& clock, prometheus::Registry& registry, std::string api_key,
             engines::IoLoops& loops);
  // The same with explicit limits.
  OpenAiShim(const router::Settings& settings, router::Router& router, router::Fleet& fleet,
             const engines::Clock& clock, prometheus::Registry& registry, std::string api_key,
             engines::IoLoops& loops, HttpDoorOptions options);
  ~OpenAiShim();
  OpenAiShim(const OpenAiShim&) = delete;
  OpenAiShim& operator=(const OpenAiShim&) = delete;

  // Binds `host:port` (port 0 picks a free port); returns the bound port.
  absl::StatusOr<int> Bind(const std::string& host, int port);
  // Runs `hook` before each /metrics scrape (e.g. to refresh process_*
  // series). Call before Start().
  void SetBeforeScrape(std::function<void()> hook);
  // Starts accepting on the loops.
  void Start();
  // Graceful shutdown, step 1: /ready reports 503 and responses close their
  // connections (the router itself refuses new requests once draining).
  void BeginDrain();
  // Step 2: waits until every generation response has been written to its
  // end (streams included), at most until `deadline`. False on timeout.
  bool WaitIdle(engines::MonoTime deadline);
  // Step 3: closes the listener and every connection; a stream still open is
  // cut (and its request cancelled).
  void StopAccepting();
  // Waits until the accept loop and every connection have ended (after
  // StopAccepting). Never call it on a loop thread.
  void Join();

  // Client connections open now.
  int open_connections() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// Splits "HOST:PORT" ("[::1]:80" for IPv6). False if malformed.
bool SplitHostPort(const std::string& address, std::string* host, int* port);

}  // namespace narwhal::server

#endif  // NARWHAL_SERVER_HTTP_OPENAI_SHIM_H_
