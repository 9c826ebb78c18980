#include "tests/fakes/serve_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"

extern char** environ;

namespace narwhal::testing {
namespace {

struct Spawned {
  pid_t pid = -1;
  int stdout_fd = -1;  // read end of the child's stdout
};

bool HasFlag(const std::vector<std::string>& args, const std::string& flag) {
  for (const std::string& arg : args) {
    if (arg == flag || arg.rfind(flag + "=", 0) == 0) return true;
  }
  return false;
}

std::optional<int> ExitCode(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return -WTERMSIG(wait_status);
  return std::nullopt;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

absl::Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

// fork + exec of the binary with `args`, stdin from /dev/null, stdout to a
// pipe, stderr to `stderr_path`. Everything the child runs before exec is
// async-signal-safe: the test process has other threads.
absl::StatusOr<Spawned> Spawn(const std::vector<std::string>& args,
                              const std::vector<std::pair<std::string, std::string>>& env,
                              const std::string& stderr_path) {
  const std::string binary = ServeProcess::BinaryPath();
  std::vector<std::string> argv_storage = {binary};
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& arg : argv_storage) argv.push_back(arg.data());
  argv.push_back(nullptr);

  std::vector<std::string> env_storage;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    bool replaced = false;
    for (const auto& [name, value] : env) replaced |= entry.rfind(name + "=", 0) == 0;
    if (!replaced) env_storage.push_back(entry);
  }
  for (const auto& [name, value] : env) env_storage.push_back(name + "=" + value);
  std::vector<char*> envp;
  for (std::string& entry : env_storage) envp.push_back(entry.data());
  envp.push_back(nullptr);

  const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  const int err_fd = open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  int out_pipe[2] = {-1, -1};
  if (null_fd < 0 || err_fd < 0 || pipe2(out_pipe, O_CLOEXEC) != 0) {
    const std::string why = std::strerror(errno);
    if (null_fd >= 0) close(null_fd);
    if (err_fd >= 0) close(err_fd);
    return absl::InternalError(absl::StrCat("cannot prepare narwhal-serve's stdio: ", why));
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid == 0) {
    // Child: die with the test process, wire stdio, run the binary.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    signal(SIGPIPE, SIG_DFL);
    dup2(null_fd, STDIN_FILENO);
    dup2(out_pipe[1], STDOUT_FILENO);
    dup2(err_fd, STDERR_FILENO);
    syscall(SYS_close_range, 3U, ~0U, 0U);
    execve(binary.c_str(), argv.data(), envp.data());
    _exit(127);
  }
  const int fork_errno = errno;
  close(null_fd);
  close(err_fd);
  close(out_pipe[1]);
  if (pid < 0) {
    close(out_pipe[0]);
    return absl::InternalError(absl::StrCat("fork: ", std::strerror(fork_errno)));
  }
  return Spawned{pid, out_pipe[0]};
}

// Reads from `fd` until a newline, EOF or the deadline. Returns what was read
// (without the newline) and whether a full line arrived.
bool ReadLine(int fd, absl::Time deadline, std::string* line) {
  std::string buffer;
  while (buffer.find('\n') == std::string::npos) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) break;
    pollfd p = {fd, POLLIN, 0};
    const int n = poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) continue;
    char chunk[512];
    const ssize_t got = read(fd, chunk, sizeof(chunk));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    buffer.append(chunk, static_cast<size_t>(got));
  }
  const size_t newline = buffer.find('\n');
  *line = buffer.substr(0, newline);
  return newline != std::string::npos;
}

// Waits for `pid` at most `timeout`; the exit code, or nullopt while it runs.
std::optional<int> WaitPid(pid_t pid, absl::Duration timeout, bool* reaped) {
  *reaped = false;
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    int status = 0;
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) {
      *reaped = true;
      return ExitCode(status);
    }
    if (r < 0 && errno != EINTR) {
      *reaped = true;  // not our child any more
      return std::nullopt;
    }
    if (absl::Now() >= deadline) return std::nullopt;
    absl::SleepFor(absl::Milliseconds(5));
  }
}

}  // namespace

std::string TestTempRoot() {
  for (const char* name : {"TEST_TMPDIR", "TMPDIR"}) {
    const char* value = std::getenv(name);
    if (value != nullptr && *value != '\0') return value;
  }
  return "/tmp";
}

absl::StatusOr<std::string> MakeScratchDir(const std::string& prefix) {
  std::string pattern = absl::StrCat(TestTempRoot(), "/", prefix, "XXXXXX");
  if (mkdtemp(pattern.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("mkdtemp ", pattern, ": ", std::strerror(errno)));
  }
  return pattern;
}

std::string ServeProcess::BinaryPath() {
  const char* path = std::getenv("NARWHAL_SERVE_BIN");
  if (path != nullptr && *path != '\0') return path;
  return NARWHAL_SERVE_BINARY;
}

absl::StatusOr<std::unique_ptr<ServeProcess>> ServeProcess::Start(ServeOptions options) {
  std::unique_ptr<ServeProcess> serve(new ServeProcess());
  absl::StatusOr<std::string> dir = MakeScratchDir("narwhal-e2e-serve-");
  if (!dir.ok()) return dir.status();
  serve->dir_ = *dir;
  serve->stderr_path_ = serve->dir_ + "/stderr.log";

  std::vector<std::string> args;
  if (!options.config.is_null()) {
    const std::string config_path = serve->dir_ + "/fleet.json";
    if (absl::Status s = WriteFile(config_path, options.config.dump(2)); !s.ok()) return s;
    args.insert(args.end(), {"--config", config_path});
  }
  if (options.journal) {
    serve->journal_path_ = serve->dir_ + "/journal.jsonl";
    args.insert(args.end(), {"--journal", serve->journal_path_});
  }
  if (options.loopback_listeners) {
    for (const char* flag : {"--http", "--grpc", "--admin"}) {
      if (!HasFlag(options.args, flag)) args.insert(args.end(), {flag, "127.0.0.1:0"});
    }
  }
  args.insert(args.end(), options.args.begin(), options.args.end());

  absl::StatusOr<Spawned> spawned = Spawn(args, options.env, serve->stderr_path_);
  if (!spawned.ok()) return spawned.status();
  serve->pid_ = spawned->pid;
  serve->stdout_fd_ = spawned->stdout_fd;

  std::string line;
  const bool full = ReadLine(serve->stdout_fd_, absl::Now() + options.ready_timeout, &line);
  if (!full || line.rfind("narwhal-serve ready ", 0) != 0) {
    bool reaped = false;
    std::optional<int> code = WaitPid(serve->pid_, absl::Milliseconds(500), &reaped);
    const std::string how = code ? absl::StrCat("exited with ", *code)
                                 : absl::StrCat("printed no ready line within ",
                                                absl::FormatDuration(options.ready_timeout));
    if (reaped) serve->pid_ = -1;
    const std::string message =
        absl::StrCat("narwhal-serve ", how, "; stdout: \"", line, "\"", serve->StderrTail());
    serve->Reap();
    serve->keep_scratch_ = true;  // the message names its stderr file
    return absl::FailedPreconditionError(message);
  }
  // narwhal-serve ready http=HOST:PORT grpc=HOST:PORT [admin=HOST:PORT]
  serve->ready_line_ = line;
  for (absl::string_view field : absl::StrSplit(line, ' ', absl::SkipEmpty())) {
    const size_t eq = field.find('=');
    if (eq == absl::string_view::npos) continue;
    serve->ready_[std::string(field.substr(0, eq))] = std::string(field.substr(eq + 1));
  }
  if (serve->http_port() <= 0) {
    return absl::InternalError(absl::StrCat("ready line without an http address: ", line));
  }
  return serve;
}

ExitReport ServeProcess::Run(std::vector<std::string> args, const nlohmann::json& config,
                             absl::Duration timeout) {
  ExitReport report;
  absl::StatusOr<std::string> dir = MakeScratchDir("narwhal-e2e-run-");
  if (!dir.ok()) {
    report.stderr_text = std::string(dir.status().message());
    return report;
  }
  if (!config.is_null()) {
    const std::string config_path = *dir + "/fleet.json";
    if (absl::Status s =
            WriteFile(config_path, config.is_string() ? config.get<std::string>() : config.dump(2));
        !s.ok()) {
      report.stderr_text = std::string(s.message());
      return report;
    }
    args.insert(args.begin(), {"--config", config_path});
  }
  const std::string stderr_path = *dir + "/stderr.log";
  absl::StatusOr<Spawned> spawned = Spawn(args, {}, stderr_path);
  if (!spawned.ok()) {
    report.stderr_text = std::string(spawned.status().message());
    return report;
  }
  // Collect stdout until EOF (the exit) or the timeout.
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) break;
    pollfd p = {spawned->stdout_fd, POLLIN, 0};
    const int n = poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1);
    if (n <= 0) continue;
    char chunk[512];
    const ssize_t got = read(spawned->stdout_fd, chunk, sizeof(chunk));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    report.stdout_text.append(chunk, static_cast<size_t>(got));
  }
  close(spawned->stdout_fd);
  bool reaped = false;
  report.exit_code =
      WaitPid(spawned->pid, std::max(deadline - absl::Now(), absl::Seconds(1)), &reaped);
  if (!reaped) {
    kill(spawned->pid, SIGKILL);
    int status = 0;
    waitpid(spawned->pid, &status, 0);
    report.exit_code = std::nullopt;
  }
  report.stderr_text = ReadFile(stderr_path);
  std::error_code ignored;
  std::filesystem::remove_all(*dir, ignored);
  return report;
}

ServeProcess::~ServeProcess() {
  Reap();
  if (!keep_scratch_ && !dir_.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
}

void ServeProcess::Reap() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    int status = 0;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
  }
  if (stdout_fd_ >= 0) close(stdout_fd_);
  stdout_fd_ = -1;
}

std::string ServeProcess::host(const std::string& key) const {
  auto it = ready_.find(key);
  if (it == ready_.end()) return "";
  const size_t colon = it->second.rfind(':');
  return colon == std::string::npos ? it->second : it->second.substr(0, colon);
}

int ServeProcess::port(const std::string& key) const {
  auto it = ready_.find(key);
  if (it == ready_.end()) return 0;
  const size_t colon = it->second.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(it->second.substr(colon + 1), &port)) {
    return 0;
  }
  return port;
}

std::string ServeProcess::grpc_target() const { return absl::StrCat("127.0.0.1:", grpc_port()); }

std::string ServeProcess::admin_address() const {
  return absl::StrCat("127.0.0.1:", admin_port());
}

std::string ServeProcess::admin_url() const { return "http://" + admin_address(); }

std::vector<nlohmann::json> ServeProcess::JournalRows() const {
  std::vector<nlohmann::json> rows;
  if (journal_path_.empty()) return rows;
  const std::string text = ReadFile(journal_path_);
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    nlohmann::json row = nlohmann::json::parse(line, nullptr, false);
    if (row.is_discarded()) row = {{"unparsable", std::string(line)}};
    rows.push_back(std::move(row));
  }
  return rows;
}

std::vector<nlohmann::json> ServeProcess::TerminalRows() const {
  std::vector<nlohmann::json> rows;
  for (nlohmann::json& row : JournalRows()) {
    if (!row.is_object() || !row.contains("event")) rows.push_back(std::move(row));
  }
  return rows;
}

std::vector<nlohmann::json> ServeProcess::EventRows() const {
  std::vector<nlohmann::json> rows;
  for (nlohmann::json& row : JournalRows()) {
    if (row.is_object() && row.contains("event")) rows.push_back(std::move(row));
  }
  return rows;
}

std::vector<nlohmann::json> ServeProcess::JournalRowsFor(const std::string& rid) const {
  std::vector<nlohmann::json> rows;
  for (nlohmann::json& row : JournalRows()) {
    if (row.is_object() && row.value("rid", "") == rid) rows.push_back(std::move(row));
  }
  return rows;
}

absl::StatusOr<nlohmann::json> ServeProcess::WaitJournalRow(const std::string& rid,
                                                            absl::Duration timeout) const {
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    std::vector<nlohmann::json> rows = JournalRowsFor(rid);
    if (!rows.empty()) return rows.front();
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("no journal row for rid ", rid, " within ", absl::FormatDuration(timeout)));
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
}

std::vector<nlohmann::json> ServeProcess::WaitJournalRows(size_t count,
                                                          absl::Duration timeout) const {
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    std::vector<nlohmann::json> rows = TerminalRows();
    if (rows.size() >= count || absl::Now() >= deadline) return rows;
    absl::SleepFor(absl::Milliseconds(10));
  }
}

std::string ServeProcess::Stderr() const { return ReadFile(stderr_path_); }

std::string ServeProcess::StderrTail(size_t max_bytes) const {
  std::string text = Stderr();
  if (text.size() > max_bytes) text = "..." + text.substr(text.size() - max_bytes);
  return absl::StrCat("\n--- narwhal-serve stderr (", stderr_path_, ") ---\n", text,
                      "--- end of stderr ---");
}

void ServeProcess::Signal(int signal) {
  if (pid_ > 0) kill(pid_, signal);
}

std::optional<int> ServeProcess::Wait(absl::Duration timeout) {
  if (pid_ <= 0) return std::nullopt;
  bool reaped = false;
  std::optional<int> code = WaitPid(pid_, timeout, &reaped);
  if (reaped) {
    pid_ = -1;
    Reap();
  }
  return code;
}

std::optional<int> ServeProcess::Stop(absl::Duration grace) {
  if (pid_ <= 0) return std::nullopt;
  Signal(SIGTERM);
  std::optional<int> code = Wait(grace);
  if (!code && pid_ > 0) Reap();
  return code;
}

}  // namespace narwhal::testing
