// A real narwhal-sim process for tests: spawned on a free port, its ready
// line awaited, its control endpoints wrapped, and killed (and reaped) when
// the object goes away.
//
//   auto sim = narwhal::testing::SimProcess::Start(
//       {"--engine-id", "p0", "--role", "prefill"});
//   ASSERT_TRUE(sim.ok()) << sim.status();
//   (*sim)->SetFaults(R"({"faults":[{"kind":"drop_connection"}]})"_json);
//   ... point the code under test at (*sim)->url() ...
//   auto requests = (*sim)->Requests();   // what the engine received
//
// Start() adds "--port 0" unless the arguments name a port, an engine id
// ("sim-<random>") unless they name one, and "--exit-on-stdin-eof": the
// child's stdin is a pipe held by this object, so a test process that dies
// takes its engines with it. The child's stderr (its log) is inherited.
// Start() also makes the test process ignore SIGPIPE (when at its default):
// engines cut connections on purpose.
// Not thread-safe: use one SimProcess from one thread at a time (the engine
// itself serves any number of concurrent clients).
#ifndef NARWHAL_TESTS_FAKES_SIM_PROCESS_H_
#define NARWHAL_TESTS_FAKES_SIM_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace httplib {
class Client;
}  // namespace httplib

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace narwhal::testing {

class SimProcess {
 public:
  // Spawns the narwhal-sim binary built with the project with `args` and
  // waits (at most `ready_timeout`) for its ready line. Fails with the
  // reason (and reaps the child) when it exits or stays silent.
  static absl::StatusOr<std::unique_ptr<SimProcess>> Start(
      std::vector<std::string> args, absl::Duration ready_timeout = absl::Seconds(10));

  // The binary Start() runs.
  static std::string BinaryPath();

  ~SimProcess();  // SIGKILL and reap when still running
  SimProcess(const SimProcess&) = delete;
  SimProcess& operator=(const SimProcess&) = delete;

  int port() const { return port_; }
  // "http://127.0.0.1:<port>" (or the --host given); "https://..." when
  // the engine serves HTTPS (--tls-cert-file).
  std::string url() const;
  const std::string& host() const { return host_; }
  const std::string& engine_id() const { return engine_id_; }
  pid_t pid() const { return pid_; }
  // The arguments the binary runs with (after Start's additions).
  const std::vector<std::string>& args() const { return args_; }

  // POST /sim/faults with `document` ({"faults": [...]}; a bare list of
  // rules is wrapped). Fails on any answer but 200, with its body.
  absl::Status SetFaults(const nlohmann::json& document);
  // DELETE /sim/faults.
  absl::Status ClearFaults();
  // GET /sim/faults: {"faults": [...]}.
  absl::StatusOr<nlohmann::json> Faults();
  // GET /sim/requests: the list of records (see engines/sim/request_log.h).
  absl::StatusOr<nlohmann::json> Requests();
  // DELETE /sim/requests.
  absl::Status ClearRequests();
  // GET /sim/kv: {"held": [...], "consumed": [...], "expired": [...]}.
  absl::StatusOr<nlohmann::json> Kv();
  // GET /sim/info.
  absl::StatusOr<nlohmann::json> Info();

  // Sends `signal` to the engine (SIGSTOP freezes it, SIGCONT resumes it).
  void Kill(int signal);
  // Waits at most `timeout` for the engine to exit; returns its wait status
  // (as from waitpid), or nullopt while it still runs. After an exit the
  // object reports !running().
  std::optional<int> Wait(absl::Duration timeout);
  bool running() const { return pid_ > 0; }
  // Stops the engine (SIGTERM, then SIGKILL after 10 s) and starts it
  // again with the same arguments on the same port. The new process has
  // empty fault rules, request log and KV store.
  absl::Status Restart(absl::Duration ready_timeout = absl::Seconds(10));

 private:
  SimProcess() = default;
  // Spawns the binary with args_ and reads the ready line.
  absl::Status Spawn(absl::Duration ready_timeout);
  void Reap();
  absl::StatusOr<nlohmann::json> GetJson(const std::string& path);
  absl::Status Send(const std::string& method, const std::string& path, const std::string& body);
  // A client of the engine's control routes: over HTTPS (the engine's own
  // certificate and key as the client's, for an engine that requires client
  // certificates; the server's certificate is not checked) when it serves
  // HTTPS.
  std::unique_ptr<httplib::Client> ControlClient() const;

  std::vector<std::string> args_;
  std::string host_ = "127.0.0.1";
  std::string engine_id_;
  int port_ = 0;
  pid_t pid_ = -1;
  int stdin_fd_ = -1;   // write end of the child's stdin
  int stdout_fd_ = -1;  // read end of the child's stdout
};

}  // namespace narwhal::testing

#endif  // NARWHAL_TESTS_FAKES_SIM_PROCESS_H_
