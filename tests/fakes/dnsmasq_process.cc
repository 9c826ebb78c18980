#include "tests/fakes/dnsmasq_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"

namespace narwhal::testing {
namespace {

constexpr absl::Duration kPoll = absl::Milliseconds(10);
constexpr int kPortAttempts = 5;
// Ports tried for one start until one is free for both UDP and TCP.
constexpr int kPortPicks = 64;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// A port free for both UDP and TCP on 127.0.0.1 (dnsmasq takes both), or 0.
// The kernel picks a free UDP port, which may still be taken for TCP (the
// local port of a connection, or of one in TIME_WAIT: a busy machine has
// thousands). Then the pick is repeated with the rejected ports held, so
// that every pick is a port not tried yet.
int FreePort() {
  std::vector<int> held;
  int port = 0;
  for (int pick = 0; pick < kPortPicks && port == 0; ++pick) {
    const int udp = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (udp < 0) break;
    held.push_back(udp);
    sockaddr_in address = {};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof(address);
    if (bind(udp, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
        getsockname(udp, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
      break;
    }
    const int tcp = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (tcp < 0) break;
    if (bind(tcp, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0) {
      port = ntohs(address.sin_port);
    }
    close(tcp);
  }
  for (const int fd : held) close(fd);
  return port;
}

bool AcceptsConnections(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in address = {};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  close(fd);
  return ok;
}

std::string HostsText(const DnsmasqProcess::Hosts& hosts) {
  std::string text;
  for (const auto& [name, addresses] : hosts) {
    for (const std::string& address : addresses) absl::StrAppend(&text, address, " ", name, "\n");
  }
  return text;
}

absl::Status WriteFile(const std::string& path, const std::string& text) {
  const std::string temporary = path + ".new";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out.good()) return absl::InternalError(absl::StrCat("cannot write ", temporary));
  }
  std::error_code ec;
  std::filesystem::rename(temporary, path, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot write ", path, ": ", ec.message()));
  return absl::OkStatus();
}

std::string DescribeExit(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exited with ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return absl::StrCat("killed by signal ", WTERMSIG(status));
  return absl::StrCat("ended with wait status ", status);
}

}  // namespace

std::string DnsmasqProcess::BinaryPath() {
  const char* path = std::getenv("NARWHAL_DNSMASQ_BIN");
  if (path != nullptr && *path != '\0') return path;
  return "/usr/sbin/dnsmasq";
}

absl::StatusOr<std::unique_ptr<DnsmasqProcess>> DnsmasqProcess::Start(const Hosts& hosts,
                                                                       Options options) {
  if (access(BinaryPath().c_str(), X_OK) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(BinaryPath(), " is missing: install dnsmasq-base (deploy/apt-packages.txt)"));
  }
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp",
                                     "/narwhal-dnsmasq-XXXXXX");
  if (mkdtemp(pattern.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("mkdtemp: ", std::strerror(errno)));
  }
  std::unique_ptr<DnsmasqProcess> dns(new DnsmasqProcess(pattern));
  // A directory of hosts files: every SetHosts() writes a file of a new
  // name, so the log line that dnsmasq has read it names this generation.
  std::filesystem::create_directory(dns->HostsDir());
  if (absl::Status status = WriteFile(dns->HostsFile(0), HostsText(hosts)); !status.ok()) {
    return status;
  }
  absl::Status status;
  for (int attempt = 0; attempt < kPortAttempts; ++attempt) {
    const int port = FreePort();
    if (port == 0) {
      return absl::InternalError(absl::StrCat("no port of 127.0.0.1 is free for both UDP and TCP (",
                                              kPortPicks, " tried)"));
    }
    status = dns->Spawn(port, options);
    if (status.ok()) return dns;
    if (!absl::IsUnavailable(status)) break;  // anything but a port taken meanwhile
  }
  return status;
}

absl::Status DnsmasqProcess::Spawn(int port, const Options& options) {
  std::filesystem::remove(LogPath());
  std::vector<std::string> args = {
      BinaryPath(),
      "--keep-in-foreground",
      "--conf-file=/dev/null",  // not the system's /etc/dnsmasq.conf
      absl::StrCat("--port=", port),
      "--listen-address=127.0.0.1",
      "--bind-interfaces",
      "--no-resolv",  // no upstream: names it does not know are REFUSED
      "--no-hosts",   // not /etc/hosts
      absl::StrCat("--addn-hosts=", HostsDir()),
      absl::StrCat("--pid-file=", dir_, "/dnsmasq.pid"),
      absl::StrCat("--log-facility=", LogPath()),
  };
  // As root dnsmasq drops to a "dnsmasq" user, which a container may not
  // have; it may stay root here (it binds 127.0.0.1 only).
  if (geteuid() == 0) args.push_back("--user=root");
  for (const std::string& domain : options.local_domains) {
    args.push_back(absl::StrCat("--local=/", domain, "/"));
  }
  args.insert(args.end(), options.extra_args.begin(), options.extra_args.end());

  // Everything the child needs is built before fork: only async-signal-safe
  // calls happen between fork and exec.
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  const int out = open(StderrPath().c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (out < 0 || null_fd < 0) {
    if (out >= 0) close(out);
    if (null_fd >= 0) close(null_fd);
    return absl::InternalError(absl::StrCat("cannot open ", StderrPath()));
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    dup2(null_fd, 0);
    dup2(out, 1);
    dup2(out, 2);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(out);
  close(null_fd);
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  pid_ = pid;
  port_ = port;

  const absl::Time deadline = absl::Now() + options.ready_timeout;
  const std::string read_line = absl::StrCat("read ", HostsFile(0), " ");
  while (absl::Now() < deadline) {
    int wait_status = 0;
    if (waitpid(pid_, &wait_status, WNOHANG) == pid_) {
      pid_ = -1;
      const std::string said = std::string(absl::StripAsciiWhitespace(ReadFile(StderrPath())));
      const std::string why = absl::StrCat("dnsmasq ", DescribeExit(wait_status), ": ", said);
      if (absl::StrContains(said, "Address already in use")) return absl::UnavailableError(why);
      return absl::FailedPreconditionError(why);
    }
    if (absl::StrContains(ReadFile(LogPath()), read_line) && AcceptsConnections(port_)) {
      return absl::OkStatus();
    }
    absl::SleepFor(kPoll);
  }
  (void)Stop();
  return absl::DeadlineExceededError(
      absl::StrCat("dnsmasq was not ready within ", absl::FormatDuration(options.ready_timeout),
                   "; its log: ", ReadFile(LogPath())));
}

DnsmasqProcess::~DnsmasqProcess() {
  (void)Stop();
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

std::string DnsmasqProcess::server() const { return absl::StrCat("127.0.0.1:", port_); }

absl::Status DnsmasqProcess::SetHosts(const Hosts& hosts, absl::Duration timeout) {
  if (pid_ <= 0) return absl::FailedPreconditionError("dnsmasq is not running");
  const int next = generation_ + 1;
  if (absl::Status status = WriteFile(HostsFile(next), HostsText(hosts)); !status.ok()) {
    return status;
  }
  std::error_code ec;
  std::filesystem::remove(HostsFile(generation_), ec);
  generation_ = next;
  kill(pid_, SIGHUP);
  const std::string read_line = absl::StrCat("read ", HostsFile(next), " ");
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (absl::StrContains(ReadFile(LogPath()), read_line)) return absl::OkStatus();
    absl::SleepFor(kPoll);
  }
  return absl::DeadlineExceededError(absl::StrCat(
      "dnsmasq did not re-read its hosts within ", absl::FormatDuration(timeout)));
}

void DnsmasqProcess::Signal(int signal) {
  if (pid_ > 0) kill(pid_, signal);
}

absl::Status DnsmasqProcess::Stop(absl::Duration timeout) {
  if (pid_ <= 0) return absl::OkStatus();
  kill(pid_, SIGCONT);  // a stopped server cannot act on SIGTERM
  kill(pid_, SIGTERM);
  const absl::Time deadline = absl::Now() + timeout;
  int wait_status = 0;
  while (absl::Now() < deadline) {
    if (waitpid(pid_, &wait_status, WNOHANG) == pid_) {
      pid_ = -1;
      return absl::OkStatus();
    }
    absl::SleepFor(kPoll);
  }
  kill(pid_, SIGKILL);
  waitpid(pid_, &wait_status, 0);
  pid_ = -1;
  return absl::DeadlineExceededError(
      absl::StrCat("dnsmasq did not stop within ", absl::FormatDuration(timeout), "; killed"));
}

}  // namespace narwhal::testing
