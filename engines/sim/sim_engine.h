// A simulated vLLM engine with the NixlConnector, served over HTTP on its own
// thread: OpenAI completions and chat (streaming or not) with deterministic
// text, producer descriptors and consumer pulls of KV handoffs, and fault
// injection at run time (see routes.h, generation.h and fault_rules.h for
// the wire behaviour).
//
// Engines share no state: several can run in one process. Start() makes the
// process ignore SIGPIPE (when it was at its default) because injected
// faults cut connections that httplib may still write to.
//
//   SimEngine engine(options);
//   absl::Status status = engine.Start();   // bound and serving
//   ... engine.port() ...
//   engine.Stop();                          // also done by the destructor
#ifndef NARWHAL_ENGINES_SIM_SIM_ENGINE_H_
#define NARWHAL_ENGINES_SIM_SIM_ENGINE_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "engines/sim/sim_options.h"

namespace narwhal::sim {

class SimEngine {
 public:
  explicit SimEngine(SimOptions options);
  ~SimEngine();  // Stop()

  SimEngine(const SimEngine&) = delete;
  SimEngine& operator=(const SimEngine&) = delete;

  // Binds options().host:options().port (port 0 picks a free one; another
  // listener on the same port makes it fail), raises the listen backlog to
  // 1024, starts the worker pool and returns once the server accepts
  // requests. Fails with a message naming the address when binding fails,
  // and when called twice.
  absl::Status Start();

  // Ends every request in progress (silences and delays included), closes
  // all connections and joins the server thread. Idempotent. Returns
  // promptly even with silent streams open; only a KV pull in flight can
  // hold it, for at most its 5 s timeout.
  void Stop();

  // The bound port; 0 before Start().
  int port() const;
  // "http://<host>:<port>" with the advertised host ("https://" when the
  // options name a TLS certificate).
  std::string url() const;
  const SimOptions& options() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace narwhal::sim

#endif  // NARWHAL_ENGINES_SIM_SIM_ENGINE_H_
