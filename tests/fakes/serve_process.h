// A real narwhal-serve process for end-to-end tests (the one process helper
// of the e2e and admin suites): a fleet config written
// to a scratch directory, the binary spawned with loopback listeners on port
// 0, its ready line parsed by key, its stderr captured to a file (quoted in
// failure messages) and its journal read back.
//
//   nlohmann::json config = {{"model", "m"}, {"engines", ...}, ...};
//   auto serve = narwhal::testing::ServeProcess::Start({.config = config});
//   ASSERT_TRUE(serve.ok()) << serve.status();
//   httplib::Client client("127.0.0.1", (*serve)->http_port());
//   ...
//   std::vector<nlohmann::json> rows = (*serve)->JournalRows();
//
// The child gets PR_SET_PDEATHSIG(SIGKILL): a test process that dies takes
// its routers with it. Start a ServeProcess from a thread that outlives it
// (the test's main thread). Not thread-safe.
#ifndef NARWHAL_TESTS_FAKES_SERVE_PROCESS_H_
#define NARWHAL_TESTS_FAKES_SERVE_PROCESS_H_

#include <sys/types.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace narwhal::testing {

struct ServeOptions {
  // The fleet config, written to <scratch>/fleet.json and passed with
  // --config. Null: no --config (the embedded simulated fleet).
  nlohmann::json config;
  // Pass --journal <scratch>/journal.jsonl.
  bool journal = true;
  // Listener flags added unless `args` names them: --http, --grpc and
  // --admin, each 127.0.0.1:0.
  bool loopback_listeners = true;
  // More arguments, after the ones above.
  std::vector<std::string> args;
  // Environment variables set (or replaced) in the child.
  std::vector<std::pair<std::string, std::string>> env;
  absl::Duration ready_timeout = absl::Seconds(20);
};

// How a process that ran to its end ended, and what it said.
struct ExitReport {
  // Exit status when it exited, else -<signal>; nullopt when it was still
  // running at the timeout (it is then killed).
  std::optional<int> exit_code;
  std::string stdout_text;
  std::string stderr_text;
};

class ServeProcess {
 public:
  // Writes the config, spawns narwhal-serve and waits for its ready line.
  // Fails (with the captured stderr) when it exits or stays silent.
  static absl::StatusOr<std::unique_ptr<ServeProcess>> Start(ServeOptions options);

  // Runs narwhal-serve with exactly `args` (plus --config <file> when
  // `config` is not null) until it exits, at most `timeout`.
  static ExitReport Run(std::vector<std::string> args, const nlohmann::json& config,
                        absl::Duration timeout = absl::Seconds(20));

  // The binary Start() and Run() spawn (NARWHAL_SERVE_BIN overrides).
  static std::string BinaryPath();

  // SIGKILL and reap when still running; removes the scratch directory
  // unless keep_scratch(true) was called.
  ~ServeProcess();
  ServeProcess(const ServeProcess&) = delete;
  ServeProcess& operator=(const ServeProcess&) = delete;

  // The ready line's fields by key ("http" -> "127.0.0.1:41234", ...).
  const std::map<std::string, std::string>& ready_fields() const { return ready_; }
  // Host and port of a ready-line address ("http", "grpc", "admin"); port 0
  // when the line has no such key.
  std::string host(const std::string& key) const;
  int port(const std::string& key) const;
  int http_port() const { return port("http"); }
  int grpc_port() const { return port("grpc"); }
  int admin_port() const { return port("admin"); }
  // "127.0.0.1:<grpc port>", for gRPC channels.
  std::string grpc_target() const;
  // "127.0.0.1:<admin port>" and "http://127.0.0.1:<admin port>" (buf curl).
  std::string admin_address() const;
  std::string admin_url() const;
  // The ready line as printed (without the newline).
  const std::string& ready_line() const { return ready_line_; }

  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0; }
  const std::string& scratch_dir() const { return dir_; }
  // Keep the scratch directory (config, journal, stderr) for a post-mortem.
  void keep_scratch(bool keep) { keep_scratch_ = keep; }
  const std::string& journal_path() const { return journal_path_; }

  // Every row of the journal so far (lines that do not parse are returned
  // as {"unparsable": <line>}).
  std::vector<nlohmann::json> JournalRows() const;
  // The terminal rows (one per client request); event rows (with an
  // "event" key: holds, ejections, probes...) left out.
  std::vector<nlohmann::json> TerminalRows() const;
  // The event rows.
  std::vector<nlohmann::json> EventRows() const;
  // The rows whose "rid" is `rid`.
  std::vector<nlohmann::json> JournalRowsFor(const std::string& rid) const;
  // Waits (at most `timeout`) until the journal has a row for `rid`.
  absl::StatusOr<nlohmann::json> WaitJournalRow(const std::string& rid,
                                                absl::Duration timeout = absl::Seconds(10)) const;
  // Waits until the journal holds at least `count` terminal rows; returns
  // the terminal rows.
  std::vector<nlohmann::json> WaitJournalRows(size_t count,
                                              absl::Duration timeout = absl::Seconds(10)) const;

  // What the router logged so far (its stderr).
  std::string Stderr() const;
  // The stderr's last `max_bytes`, prefixed for failure messages.
  std::string StderrTail(size_t max_bytes = 4000) const;

  void Signal(int signal);
  // Waits at most `timeout` for the process to exit; returns its exit code
  // (-<signal> when killed by one), or nullopt while it still runs.
  std::optional<int> Wait(absl::Duration timeout);
  // SIGTERM, then SIGKILL after `grace`; returns the exit code.
  std::optional<int> Stop(absl::Duration grace = absl::Seconds(15));

 private:
  ServeProcess() = default;
  void Reap();

  std::string dir_;
  std::string journal_path_;
  std::string stderr_path_;
  std::map<std::string, std::string> ready_;
  std::string ready_line_;
  pid_t pid_ = -1;
  int stdout_fd_ = -1;
  bool keep_scratch_ = false;
};

// The scratch directory tests write into: $TEST_TMPDIR, $TMPDIR or /tmp.
std::string TestTempRoot();
// A fresh directory under TestTempRoot() ("<prefix>XXXXXX").
absl::StatusOr<std::string> MakeScratchDir(const std::string& prefix);

}  // namespace narwhal::testing

#endif  // NARWHAL_TESTS_FAKES_SERVE_PROCESS_H_
