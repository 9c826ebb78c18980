#include "tests/fakes/command.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <optional>

#include "absl/time/clock.h"

extern char** environ;

namespace narwhal::testing {
namespace {

// Forks and execs argv with `env` added, stdout/stderr to the given fds
// (stdin from /dev/null). The child dies with this process. -1 on failure.
pid_t Spawn(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
            int out_fd, int err_fd) {
  // Everything the child needs is built before fork: only async-signal-safe
  // calls happen between fork and exec.
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const std::string name = entry.substr(0, entry.find('='));
    if (env.count(name) == 0) env_strings.push_back(entry);
  }
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (std::string& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  const pid_t parent = getpid();

  const pid_t pid = fork();
  if (pid != 0) return pid;
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(127);
  const int null_fd = open("/dev/null", O_RDONLY);
  if (null_fd >= 0) dup2(null_fd, 0);
  dup2(out_fd, 1);
  dup2(err_fd, 2);
  // Signals blocked in the test process must not stay blocked in the child.
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  execve(args[0], args.data(), envp.data());
  _exit(127);
}

// Reads what is available from `fd` into `out`; false at EOF or error.
bool ReadSome(int fd, std::string* out) {
  char buf[4096];
  const ssize_t n = read(fd, buf, sizeof(buf));
  if (n > 0) {
    out->append(buf, static_cast<size_t>(n));
    return true;
  }
  return n < 0 && (errno == EINTR || errno == EAGAIN);
}

std::optional<int> WaitFor(pid_t pid, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    int status = 0;
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    if (r < 0 && errno != EINTR) return std::nullopt;
    if (absl::Now() >= deadline) return std::nullopt;
    absl::SleepFor(absl::Milliseconds(10));
  }
}

}  // namespace

CommandResult RunCommand(const std::vector<std::string>& argv, absl::Duration timeout,
                         const std::map<std::string, std::string>& env) {
  CommandResult result;
  int out_pipe[2];
  int err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) return result;
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    close(out_pipe[0]);
    close(out_pipe[1]);
    return result;
  }
  const pid_t pid = Spawn(argv, env, out_pipe[1], err_pipe[1]);
  close(out_pipe[1]);
  close(err_pipe[1]);
  const absl::Time deadline = absl::Now() + timeout;
  bool out_open = true;
  bool err_open = true;
  while (pid > 0 && (out_open || err_open)) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      kill(pid, SIGKILL);
      break;
    }
    pollfd fds[2] = {{out_open ? out_pipe[0] : -1, POLLIN, 0},
                     {err_open ? err_pipe[0] : -1, POLLIN, 0}};
    const int ready = poll(fds, 2, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1);
    if (ready < 0 && errno != EINTR) break;
    if (fds[0].revents != 0) out_open = ReadSome(out_pipe[0], &result.out);
    if (fds[1].revents != 0) err_open = ReadSome(err_pipe[0], &result.err);
  }
  close(out_pipe[0]);
  close(err_pipe[0]);
  if (pid <= 0) {
    result.err = "cannot spawn " + argv[0];
    return result;
  }
  std::optional<int> status = WaitFor(pid, deadline - absl::Now() + absl::Seconds(1));
  if (!status) {
    kill(pid, SIGKILL);
    status = WaitFor(pid, absl::Seconds(10));
  }
  if (status && WIFEXITED(*status)) result.exit_code = WEXITSTATUS(*status);
  return result;
}

}  // namespace narwhal::testing
