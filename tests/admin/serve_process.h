// Child processes for end-to-end tests: a narwhal-serve process (spawned,
// its ready line parsed, SIGTERMed when the object goes away) and a
// one-shot command runner (for buf curl).
//
//   auto serve = ServeProcess::Start({"--http", "127.0.0.1:0", ...});
//   ASSERT_TRUE(serve.ok()) << serve.status();
//   ASSERT_TRUE((*serve)->WaitReady(absl::Seconds(30)).ok());
//   CommandResult r = RunCommand({buf, "curl", ..., (*serve)->admin_url() + "/..."});
//
// The child dies with the test process (PR_SET_PDEATHSIG). Its stderr goes
// to a file the test can read (Stderr()). Not thread-safe.
#ifndef NARWHAL_TESTS_ADMIN_SERVE_PROCESS_H_
#define NARWHAL_TESTS_ADMIN_SERVE_PROCESS_H_

#include <sys/types.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace narwhal::testing {

struct CommandResult {
  // The exit code, or -1 when it was killed (timeout or signal).
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs argv[0] (a path) with `argv` and extra environment `env`; kills it
// after `timeout`.
CommandResult RunCommand(const std::vector<std::string>& argv,
                         absl::Duration timeout = absl::Seconds(60),
                         const std::map<std::string, std::string>& env = {});

class ServeProcess {
 public:
  // Spawns the narwhal-serve binary built with the project with `args` and
  // extra environment `env`. Does not wait for it to be ready.
  static absl::StatusOr<std::unique_ptr<ServeProcess>> Start(
      std::vector<std::string> args, const std::map<std::string, std::string>& env = {});
  static std::string BinaryPath();

  ~ServeProcess();  // SIGTERM, then SIGKILL after 10 s; reaps
  ServeProcess(const ServeProcess&) = delete;
  ServeProcess& operator=(const ServeProcess&) = delete;

  // Reads stdout until the ready line; fails if the process exits first
  // (with its stderr) or stays silent for `timeout`.
  absl::Status WaitReady(absl::Duration timeout);
  // The ready line (without the newline) and the ports it names.
  const std::string& ready_line() const { return ready_line_; }
  int http_port() const { return http_port_; }
  int grpc_port() const { return grpc_port_; }
  int admin_port() const { return admin_port_; }
  // "127.0.0.1:<admin port>" and "http://127.0.0.1:<admin port>".
  std::string admin_address() const;
  std::string admin_url() const;

  void Signal(int signal);
  // Waits at most `timeout` for the exit; its wait status, or nullopt.
  std::optional<int> Wait(absl::Duration timeout);
  // Everything on stdout after the ready line (read after an exit).
  std::string RemainingStdout();
  std::string Stderr() const;

 private:
  ServeProcess() = default;

  pid_t pid_ = -1;
  int stdout_fd_ = -1;
  std::string stderr_path_;
  std::string buffered_;
  std::string ready_line_;
  int http_port_ = 0;
  int grpc_port_ = 0;
  int admin_port_ = 0;
};

}  // namespace narwhal::testing

#endif  // NARWHAL_TESTS_ADMIN_SERVE_PROCESS_H_
