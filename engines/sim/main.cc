// narwhal-sim: a simulated vLLM engine (see sim_args.h for the command line
// and sim_engine.h for what it serves).
//
// Prints "narwhal-sim ready port=<port> engine_id=<id>" on stdout once it
// accepts requests. Exit status: 0 after SIGTERM or SIGINT (or, with
// --exit-on-stdin-eof, when stdin closes), 1 when it cannot listen, 2 on bad
// arguments.
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engines/sim/sim_args.h"
#include "engines/sim/sim_engine.h"
#include "engines/sim/sim_log.h"
#include "version/build_info.h"

namespace narwhal::sim {
namespace {

bool LookupEnv(const std::string& name, std::string* value) {
  const char* text = std::getenv(name.c_str());
  if (text == nullptr) return false;
  *value = text;
  return true;
}

// Blocks until a termination signal arrives (or stdin closes, when asked).
void WaitForShutdown(int signal_fd, bool watch_stdin, const SimLog& log) {
  for (;;) {
    pollfd fds[2] = {{signal_fd, POLLIN, 0}, {STDIN_FILENO, POLLIN, 0}};
    const int n = poll(fds, watch_stdin ? 2 : 1, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      log.Error(absl::StrCat("poll failed (errno ", errno, "); stopping"));
      return;
    }
    if (fds[0].revents != 0) {
      signalfd_siginfo info{};
      if (read(signal_fd, &info, sizeof(info)) == sizeof(info)) {
        log.Info(absl::StrCat("signal ", info.ssi_signo, " received; stopping"));
      }
      return;
    }
    if (watch_stdin && fds[1].revents != 0) {
      char buffer[256];
      const ssize_t got = read(STDIN_FILENO, buffer, sizeof(buffer));
      if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN)) {
        log.Info("standard input closed; stopping");
        return;
      }
    }
  }
}

int Run(int argc, char** argv) {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  // Blocked before any thread starts, so every thread inherits the mask and
  // the signals reach only the signalfd.
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  const std::vector<std::string> args(argv + 1, argv + argc);
  absl::StatusOr<SimArgs> parsed = ParseSimArgs(args, LookupEnv);
  if (!parsed.ok()) {
    std::fprintf(stderr, "narwhal-sim: %s\n%s", std::string(parsed.status().message()).c_str(),
                 SimUsage());
    return 2;
  }
  if (parsed->help) {
    std::fputs(SimUsage(), stdout);
    return 0;
  }
  if (parsed->version) {
    std::puts(narwhal::VersionLine("narwhal-sim").c_str());
    return 0;
  }
  const int signal_fd = signalfd(-1, &signals, SFD_CLOEXEC);
  if (signal_fd < 0) {
    std::perror("narwhal-sim: signalfd");
    return 1;
  }

  SimEngine engine(parsed->options);
  const SimLog log(parsed->options.engine_id);
  if (absl::Status status = engine.Start(); !status.ok()) {
    log.Error(std::string(status.message()));
    return 1;
  }
  std::printf("narwhal-sim ready port=%d engine_id=%s\n", engine.port(),
              parsed->options.engine_id.c_str());
  std::fflush(stdout);

  WaitForShutdown(signal_fd, parsed->exit_on_stdin_eof, log);
  engine.Stop();
  close(signal_fd);
  return 0;
}

}  // namespace
}  // namespace narwhal::sim

int main(int argc, char** argv) { return narwhal::sim::Run(argc, argv); }
