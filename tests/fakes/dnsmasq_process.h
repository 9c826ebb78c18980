// A real DNS server for tests: Debian's dnsmasq, run as a child process on
// 127.0.0.1 and a free port, answering from a hosts file the test writes.
//
//   auto dns = narwhal::testing::DnsmasqProcess::Start(
//       {{"decode.test", {"127.0.0.2", "127.0.0.3"}}});
//   ASSERT_TRUE(dns.ok()) << dns.status();
//   ... point the resolver at (*dns)->server() ("127.0.0.1:<port>") ...
//   ASSERT_TRUE((*dns)->SetHosts({{"decode.test", {"127.0.0.2"}}}).ok());
//
// What it answers: a listed name gets its addresses (A for IPv4, AAAA for
// IPv6; a listed name without an address of the asked family gets NODATA);
// an unlisted name under a local domain (Options::local_domains, "test" by
// default) gets NXDOMAIN; any other name gets REFUSED (there is no upstream
// server). The system's dnsmasq configuration, /etc/hosts and
// /etc/resolv.conf are ignored.
//
// Every wait is bounded. The child gets SIGKILL when the thread that called
// Start() ends (PR_SET_PDEATHSIG), so a crashed test leaves no server
// behind; its files live in a fresh directory under $TMPDIR (or /tmp),
// removed by the destructor. Not thread-safe: use one object from one thread
// at a time (the server serves any number of clients).
#ifndef NARWHAL_TESTS_FAKES_DNSMASQ_PROCESS_H_
#define NARWHAL_TESTS_FAKES_DNSMASQ_PROCESS_H_

#include <sys/types.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace narwhal::testing {

class DnsmasqProcess {
 public:
  // name -> its addresses (textual IPv4 or IPv6).
  using Hosts = std::map<std::string, std::vector<std::string>>;

  struct Options {
    // Unlisted names under these domains answer NXDOMAIN ("#": every name).
    std::vector<std::string> local_domains = {"test"};
    // Added to dnsmasq's command line (e.g. "--txt-record=t.test,x").
    std::vector<std::string> extra_args = {};
    // Bound on the start (per attempt; a port taken meanwhile is retried).
    absl::Duration ready_timeout = absl::Seconds(10);
  };

  // Writes `hosts`, starts dnsmasq and waits until it has read them and
  // accepts connections. Fails with dnsmasq's own words when it exits.
  static absl::StatusOr<std::unique_ptr<DnsmasqProcess>> Start(const Hosts& hosts,
                                                                Options options);
  static absl::StatusOr<std::unique_ptr<DnsmasqProcess>> Start(const Hosts& hosts) {
    return Start(hosts, Options());
  }

  // $NARWHAL_DNSMASQ_BIN, else /usr/sbin/dnsmasq.
  static std::string BinaryPath();

  ~DnsmasqProcess();  // Stop(), then the files are removed
  DnsmasqProcess(const DnsmasqProcess&) = delete;
  DnsmasqProcess& operator=(const DnsmasqProcess&) = delete;

  int port() const { return port_; }
  // "127.0.0.1:<port>", the form resolvers are configured with.
  std::string server() const;
  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0; }
  // The directory holding the hosts file and dnsmasq's log.
  const std::string& dir() const { return dir_; }

  // Replaces the hosts and makes dnsmasq re-read them (SIGHUP); returns once
  // its log says it has read this version, or fails after `timeout`.
  absl::Status SetHosts(const Hosts& hosts, absl::Duration timeout = absl::Seconds(5));

  // Sends `signal` (SIGSTOP makes a server that never answers; SIGCONT
  // resumes it).
  void Signal(int signal);

  // SIGTERM, then SIGKILL after `timeout`; reaps the child. Idempotent.
  absl::Status Stop(absl::Duration timeout = absl::Seconds(5));

 private:
  explicit DnsmasqProcess(std::string dir) : dir_(std::move(dir)) {}

  // One start on one port: ok, a port conflict (Unavailable), or another
  // failure.
  absl::Status Spawn(int port, const Options& options);
  // dnsmasq reads every file of this directory; SetHosts() replaces the
  // one file of the last generation by one of a new name, so the log line
  // "read <file>" tells that this very version has been read.
  std::string HostsDir() const { return dir_ + "/hosts.d"; }
  std::string HostsFile(int generation) const {
    return HostsDir() + "/hosts." + std::to_string(generation);
  }
  std::string LogPath() const { return dir_ + "/dnsmasq.log"; }
  std::string StderrPath() const { return dir_ + "/stderr.txt"; }

  std::string dir_;
  int generation_ = 0;
  int port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace narwhal::testing

#endif  // NARWHAL_TESTS_FAKES_DNSMASQ_PROCESS_H_
