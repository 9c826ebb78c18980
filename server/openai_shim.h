// OpenAiShim: the HTTP front door (SPEC §4).
//
// Translates OpenAI-style HTTP requests into router::Request, hands them to
// the router core and renders the outcome: status and headers are held until
// the first generated token; afterwards each decode chunk is relayed as one
// SSE event, ending with `data: [DONE]` or, after a failure, one terminal
// error event (B16). A client that disconnects at any moment — while its
// request is held or mid-stream — cancels its request (B19). Also serves
// /v1/models, /health, /ready and /metrics.
//
// httplib stays inside the .cc; one worker thread per open connection, sized
// to serving.max_inflight plus headroom.
#ifndef NARWHAL_SERVER_OPENAI_SHIM_H_
#define NARWHAL_SERVER_OPENAI_SHIM_H_

#include <memory>
#include <string>

#include <absl/status/statusor.h>
#include <prometheus/registry.h>

#include "router/clock.h"
#include "router/fleet.h"
#include "router/router.h"
#include "router/settings.h"

namespace narwhal::server {

class OpenAiShim {
 public:
  // `api_key` empty = no client authentication.
  OpenAiShim(const router::Settings& settings, router::Router& router, router::Fleet& fleet,
             const router::Clock& clock, prometheus::Registry& registry, std::string api_key);
  ~OpenAiShim();
  OpenAiShim(const OpenAiShim&) = delete;
  OpenAiShim& operator=(const OpenAiShim&) = delete;

  // Binds `host:port` (port 0 picks a free port); returns the bound port.
  absl::StatusOr<int> Bind(const std::string& host, int port);
  // Serves on a background thread.
  void Start();
  // Graceful shutdown, step 1: /ready reports 503 (the router itself refuses
  // new requests once draining).
  void BeginDrain();
  // Step 2: waits until every generation response has been written to its
  // end (streams included), at most until `deadline`. False on timeout.
  bool WaitIdle(engines::MonoTime deadline);
  // Step 3: closes the listener and every connection; a stream still open is
  // cut (and its request cancelled).
  void StopAccepting();
  // Waits until every connection handler has returned (after StopAccepting).
  void Join();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// Splits "HOST:PORT" ("[::1]:80" for IPv6). False if malformed.
bool SplitHostPort(const std::string& address, std::string* host, int* port);

}  // namespace narwhal::server

#endif  // NARWHAL_SERVER_OPENAI_SHIM_H_
