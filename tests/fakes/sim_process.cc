#include "tests/fakes/sim_process.h"

#include <fcntl.h>
#include <httplib.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <random>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"

extern char** environ;

namespace narwhal::testing {
namespace {

constexpr absl::Duration kControlTimeout = absl::Seconds(5);

// The value of `flag` in `args` ("--flag v" or "--flag=v"), if present.
std::optional<std::string> FlagValue(const std::vector<std::string>& args,
                                     const std::string& flag) {
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == flag && i + 1 < args.size()) return args[i + 1];
    if (args[i].rfind(flag + "=", 0) == 0) {
      return args[i].substr(flag.size() + 1);
    }
  }
  return std::nullopt;
}

void SetFlag(std::vector<std::string>* args, const std::string& flag, const std::string& value) {
  for (size_t i = 0; i < args->size(); ++i) {
    if ((*args)[i] == flag && i + 1 < args->size()) {
      (*args)[i + 1] = value;
      return;
    }
    if ((*args)[i].rfind(flag + "=", 0) == 0) {
      (*args)[i] = flag + "=" + value;
      return;
    }
  }
  args->push_back(flag);
  args->push_back(value);
}

std::string DescribeExit(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exited with ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return absl::StrCat("killed by signal ", WTERMSIG(status));
  return absl::StrCat("ended with wait status ", status);
}

std::string RandomSuffix() {
  std::random_device device;
  return absl::StrCat(absl::Hex(device() & 0xffffff, absl::kZeroPad6));
}

}  // namespace

std::string SimProcess::BinaryPath() {
  const char* path = std::getenv("NARWHAL_SIM_BIN");
  if (path != nullptr && *path != '\0') return path;
  return NARWHAL_SIM_BINARY;
}

absl::StatusOr<std::unique_ptr<SimProcess>> SimProcess::Start(std::vector<std::string> args,
                                                              absl::Duration ready_timeout) {
  // Engines cut connections on purpose; a client write into one must not
  // kill the test process.
  struct sigaction current {};
  if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
    signal(SIGPIPE, SIG_IGN);
  }
  std::unique_ptr<SimProcess> sim(new SimProcess());
  if (!FlagValue(args, "--port").has_value()) SetFlag(&args, "--port", "0");
  if (!FlagValue(args, "--engine-id").has_value()) {
    SetFlag(&args, "--engine-id", absl::StrCat("sim-", RandomSuffix()));
  }
  bool watch_stdin = false;
  for (const std::string& arg : args) watch_stdin |= arg == "--exit-on-stdin-eof";
  if (!watch_stdin) args.push_back("--exit-on-stdin-eof");
  if (std::optional<std::string> host = FlagValue(args, "--host")) {
    sim->host_ = *host == "0.0.0.0" ? "127.0.0.1" : *host;
  }
  sim->args_ = std::move(args);
  if (absl::Status status = sim->Spawn(ready_timeout); !status.ok()) {
    return status;
  }
  // Later restarts come back on the same port.
  SetFlag(&sim->args_, "--port", absl::StrCat(sim->port_));
  return sim;
}

absl::Status SimProcess::Spawn(absl::Duration ready_timeout) {
  int in_pipe[2];
  int out_pipe[2];
  if (pipe2(in_pipe, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  if (pipe2(out_pipe, O_CLOEXEC) != 0) {
    close(in_pipe[0]);
    close(in_pipe[1]);
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in_pipe[0], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], STDOUT_FILENO);
  // Descriptors the test process leaked (listening sockets of in-process
  // servers, say) must not live on in the engine.
  posix_spawn_file_actions_addclosefrom_np(&actions, 3);

  const std::string binary = BinaryPath();
  std::vector<std::string> argv_storage;
  argv_storage.push_back(binary);
  argv_storage.insert(argv_storage.end(), args_.begin(), args_.end());
  std::vector<char*> argv;
  for (std::string& arg : argv_storage) argv.push_back(arg.data());
  argv.push_back(nullptr);

  pid_t pid = -1;
  const int spawn_error =
      posix_spawn(&pid, binary.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(in_pipe[0]);
  close(out_pipe[1]);
  if (spawn_error != 0) {
    close(in_pipe[1]);
    close(out_pipe[0]);
    return absl::InternalError(
        absl::StrCat("cannot run ", binary, ": ", std::strerror(spawn_error)));
  }
  pid_ = pid;
  stdin_fd_ = in_pipe[1];
  stdout_fd_ = out_pipe[0];

  // Read the ready line.
  std::string line;
  const absl::Time deadline = absl::Now() + ready_timeout;
  while (line.find('\n') == std::string::npos) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      Reap();
      return absl::DeadlineExceededError(absl::StrCat("narwhal-sim printed no ready line within ",
                                                      absl::FormatDuration(ready_timeout)));
    }
    pollfd fd = {stdout_fd_, POLLIN, 0};
    const int n = poll(&fd, 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) continue;
    char buffer[512];
    const ssize_t got = read(stdout_fd_, buffer, sizeof(buffer));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      int status = 0;
      const pid_t reaped = waitpid(pid_, &status, 0);
      pid_ = -1;
      Reap();
      return absl::FailedPreconditionError(
          absl::StrCat("narwhal-sim ", args_.empty() ? "" : absl::StrJoin(args_, " "), " ",
                       reaped > 0 ? DescribeExit(status) : "ended", " before it was ready"));
    }
    line.append(buffer, static_cast<size_t>(got));
  }
  line = line.substr(0, line.find('\n'));
  // narwhal-sim ready port=<port> engine_id=<id>
  int port = 0;
  std::string engine_id;
  for (absl::string_view field : absl::StrSplit(line, ' ')) {
    if (absl::ConsumePrefix(&field, "port=")) {
      if (!absl::SimpleAtoi(field, &port)) port = 0;
    } else if (absl::ConsumePrefix(&field, "engine_id=")) {
      engine_id = std::string(field);
    }
  }
  if (line.rfind("narwhal-sim ready ", 0) != 0 || port <= 0) {
    Reap();
    return absl::InternalError(absl::StrCat("unexpected ready line: ", line));
  }
  port_ = port;
  engine_id_ = engine_id;
  return absl::OkStatus();
}

SimProcess::~SimProcess() { Reap(); }

void SimProcess::Reap() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    int status = 0;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
  }
  if (stdin_fd_ >= 0) close(stdin_fd_);
  if (stdout_fd_ >= 0) close(stdout_fd_);
  stdin_fd_ = -1;
  stdout_fd_ = -1;
}

std::string SimProcess::url() const {
  return absl::StrCat(FlagValue(args_, "--tls-cert-file") ? "https://" : "http://", host_, ":",
                      port_);
}

std::unique_ptr<httplib::Client> SimProcess::ControlClient() const {
  std::optional<std::string> cert = FlagValue(args_, "--tls-cert-file");
  std::unique_ptr<httplib::Client> client;
  if (cert) {
    client = std::make_unique<httplib::Client>(url(), *cert,
                                               FlagValue(args_, "--tls-key-file").value_or(""));
    client->enable_server_certificate_verification(false);
  } else {
    client = std::make_unique<httplib::Client>(host_, port_);
  }
  client->set_connection_timeout(absl::ToChronoMicroseconds(kControlTimeout));
  client->set_read_timeout(absl::ToChronoMicroseconds(kControlTimeout));
  return client;
}

void SimProcess::Kill(int signal) {
  if (pid_ > 0) kill(pid_, signal);
}

std::optional<int> SimProcess::Wait(absl::Duration timeout) {
  if (pid_ <= 0) return std::nullopt;
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    int status = 0;
    const pid_t reaped = waitpid(pid_, &status, WNOHANG);
    if (reaped == pid_) {
      pid_ = -1;
      Reap();  // closes the pipes
      return status;
    }
    if (reaped < 0 && errno != EINTR) return std::nullopt;
    if (absl::Now() >= deadline) return std::nullopt;
    absl::SleepFor(absl::Milliseconds(5));
  }
}

absl::Status SimProcess::Restart(absl::Duration ready_timeout) {
  if (pid_ > 0) {
    kill(pid_, SIGCONT);  // a frozen engine cannot handle SIGTERM
    kill(pid_, SIGTERM);
    if (!Wait(absl::Seconds(10)).has_value()) Reap();
  }
  Reap();
  // The port may take a moment to be free again.
  const absl::Time deadline = absl::Now() + ready_timeout;
  absl::Status status;
  do {
    status = Spawn(ready_timeout);
    if (status.ok()) return status;
    absl::SleepFor(absl::Milliseconds(50));
  } while (absl::Now() < deadline);
  return status;
}

absl::StatusOr<nlohmann::json> SimProcess::GetJson(const std::string& path) {
  std::unique_ptr<httplib::Client> client = ControlClient();
  httplib::Result result = client->Get(path);
  if (!result) {
    return absl::UnavailableError(
        absl::StrCat("GET ", path, ": ", httplib::to_string(result.error())));
  }
  if (result->status != 200) {
    return absl::InternalError(absl::StrCat("GET ", path, ": ", result->status, " ", result->body));
  }
  nlohmann::json json = nlohmann::json::parse(result->body, nullptr, false);
  if (json.is_discarded()) {
    return absl::InternalError(absl::StrCat("GET ", path, ": not JSON"));
  }
  return json;
}

absl::Status SimProcess::Send(const std::string& method, const std::string& path,
                              const std::string& body) {
  std::unique_ptr<httplib::Client> client = ControlClient();
  httplib::Result result =
      method == "POST" ? client->Post(path, body, "application/json") : client->Delete(path);
  if (!result) {
    return absl::UnavailableError(
        absl::StrCat(method, " ", path, ": ", httplib::to_string(result.error())));
  }
  if (result->status != 200) {
    return absl::InvalidArgumentError(
        absl::StrCat(method, " ", path, ": ", result->status, " ", result->body));
  }
  return absl::OkStatus();
}

absl::Status SimProcess::SetFaults(const nlohmann::json& document) {
  const nlohmann::json body = document.is_array() ? nlohmann::json{{"faults", document}} : document;
  return Send("POST", "/sim/faults", body.dump());
}

absl::Status SimProcess::ClearFaults() { return Send("DELETE", "/sim/faults", ""); }

absl::StatusOr<nlohmann::json> SimProcess::Faults() { return GetJson("/sim/faults"); }

absl::StatusOr<nlohmann::json> SimProcess::Requests() {
  absl::StatusOr<nlohmann::json> json = GetJson("/sim/requests");
  if (!json.ok()) return json.status();
  return (*json)["requests"];
}

absl::Status SimProcess::ClearRequests() { return Send("DELETE", "/sim/requests", ""); }

absl::StatusOr<nlohmann::json> SimProcess::Kv() { return GetJson("/sim/kv"); }

absl::StatusOr<nlohmann::json> SimProcess::Info() { return GetJson("/sim/info"); }

}  // namespace narwhal::testing
