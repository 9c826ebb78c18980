#include "router/fleet/cares_lookup.h"

#include <ares.h>
#include <arpa/inet.h>
#include <arpa/nameser.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include <boost/asio/post.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/system/error_code.hpp>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

namespace narwhal::router {
namespace {

namespace asio = boost::asio;

// c-ares's own retransmissions: three tries whose waits double (t, 2t, 4t),
// so that they fit the lookup's deadline, which stays the real bound.
constexpr int kTries = 3;
constexpr int kMinTryMs = 50;

// What one record type's query came back with.
struct TypeResult {
  bool done = false;
  int status = ARES_SUCCESS;         // ARES_ENODATA / ARES_ENOTFOUND: no address
  std::vector<std::string> addresses;
  bool overflow = false;             // more records than kMaxDnsAddresses
};

bool IsNoAddress(int status) { return status == ARES_ENODATA || status == ARES_ENOTFOUND; }

std::string FormatSeconds(double s) { return absl::StrCat(std::round(s * 1000) / 1000, "s"); }

// The addresses of an A (`type` ns_t_a) or AAAA answer.
TypeResult ParseAnswer(int type, const unsigned char* abuf, int alen) {
  TypeResult result;
  result.done = true;
  // One slot more than allowed tells an oversized answer apart.
  int count = static_cast<int>(kMaxDnsAddresses) + 1;
  char text[INET6_ADDRSTRLEN] = {};
  if (type == ns_t_a) {
    std::vector<ares_addrttl> records(count);
    result.status = ares_parse_a_reply(abuf, alen, nullptr, records.data(), &count);
    for (int i = 0; result.status == ARES_SUCCESS && i < count; ++i) {
      inet_ntop(AF_INET, &records[i].ipaddr, text, sizeof(text));
      result.addresses.emplace_back(text);
    }
  } else {
    std::vector<ares_addr6ttl> records(count);
    result.status = ares_parse_aaaa_reply(abuf, alen, nullptr, records.data(), &count);
    for (int i = 0; result.status == ARES_SUCCESS && i < count; ++i) {
      inet_ntop(AF_INET6, &records[i].ip6addr, text, sizeof(text));
      result.addresses.emplace_back(text);
    }
  }
  result.overflow = result.addresses.size() > kMaxDnsAddresses;
  return result;
}

std::string DescribeStatus(int status, const CaresLookupOptions& options) {
  switch (status) {
    case ARES_ETIMEOUT:
      return absl::StrCat("no answer from ", options.servers_label, " (timed out)");
    case ARES_ECONNREFUSED:
      return options.single_server
                 ? absl::StrCat(options.servers_label, " refused the connection")
                 : absl::StrCat("no server of ", options.servers_label,
                                " answered (connections refused, or SERVFAIL/REFUSED answers)");
    case ARES_ESERVFAIL:
      return absl::StrCat(options.servers_label, " answered SERVFAIL (server failure)");
    case ARES_EREFUSED:
      return absl::StrCat(options.servers_label, " answered REFUSED");
    case ARES_EFORMERR:
      return absl::StrCat(options.servers_label, " answered FORMERR (it could not read the query)");
    case ARES_ENOTIMP:
      return absl::StrCat(options.servers_label, " answered NOTIMP");
    case ARES_EBADRESP:
      return absl::StrCat("malformed answer from ", options.servers_label);
    case ARES_EBADNAME:
      return "bad name";
    case ARES_EDESTRUCTION:
    case ARES_ECANCELLED:
      return "lookup cancelled";
    default:
      return absl::StrCat("c-ares: ", ares_strerror(status));
  }
}

class CaresLookupImpl final : public CaresLookup,
                              public std::enable_shared_from_this<CaresLookupImpl> {
 public:
  CaresLookupImpl(const engines::Executor& strand, const CaresLookupOptions& options,
                  std::string name, double timeout_s, Done done)
      : strand_(strand),
        options_(options),
        name_(std::move(name)),
        timeout_s_(timeout_s),
        done_(std::move(done)),
        tick_(strand),
        deadline_(strand) {}

  ~CaresLookupImpl() override {
    // Only reached with the lookup unfinished when its io_context is being
    // destroyed: nothing may be posted any more, so `done` is dropped.
    finished_ = true;
    done_ = nullptr;
    CloseChannel();
  }

  void Start() override {
    auto self = shared_from_this();
    ares_options opts = {};
    int mask = ARES_OPT_SOCK_STATE_CB | ARES_OPT_TIMEOUTMS | ARES_OPT_TRIES;
    opts.sock_state_cb = &CaresLookupImpl::OnSocketState;
    opts.sock_state_cb_data = this;
    opts.timeout = std::max(kMinTryMs, static_cast<int>(timeout_s_ * 1000 / 7));
    opts.tries = kTries;
    if (options_.single_server) {
      opts.flags = ARES_FLAG_NOCHECKRESP;
      mask |= ARES_OPT_FLAGS;
    }
    if (options_.servers_csv.empty()) {
      if (!options_.resolv_conf.empty()) {
        opts.resolvconf_path = const_cast<char*>(options_.resolv_conf.c_str());
        mask |= ARES_OPT_RESOLVCONF;
      }
      opts.udp_port = static_cast<unsigned short>(options_.resolv_conf_port);
      opts.tcp_port = static_cast<unsigned short>(options_.resolv_conf_port);
      mask |= ARES_OPT_UDP_PORT | ARES_OPT_TCP_PORT;
    }
    if (int status = ares_init_options(&channel_, &opts, mask); status != ARES_SUCCESS) {
      channel_ = nullptr;
      Finish(DnsAnswer::Failed(
          absl::StrCat(name_, ": cannot set up a resolver: ", ares_strerror(status))));
      return;
    }
    if (!options_.servers_csv.empty()) {
      const int status = ares_set_servers_ports_csv(channel_, options_.servers_csv.c_str());
      if (status != ARES_SUCCESS) {
        Finish(DnsAnswer::Failed(absl::StrCat(name_, ": bad server list \"",
                                              options_.servers_csv, "\": ", ares_strerror(status))));
        return;
      }
    }
    deadline_.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(timeout_s_)));
    deadline_.async_wait([self](const boost::system::error_code& ec) {
      if (ec || self->finished_) return;
      self->Finish(DnsAnswer::Failed(absl::StrCat(self->name_, ": no answer from ",
                                                  self->options_.servers_label, " within ",
                                                  FormatSeconds(self->timeout_s_))));
    });
    // With servers given, the name is absolute; the system resolver applies
    // its search list and ndots as getaddrinfo would.
    auto send = options_.servers_csv.empty() ? &ares_search : &ares_query;
    send(channel_, name_.c_str(), ns_c_in, ns_t_a, &CaresLookupImpl::OnAnswer, &a_);
    if (!finished_) {
      send(channel_, name_.c_str(), ns_c_in, ns_t_aaaa, &CaresLookupImpl::OnAnswer, &aaaa_);
    }
    ScheduleTick();
  }

  void Cancel(std::string why) override {
    if (finished_) return;
    auto self = shared_from_this();
    Finish(DnsAnswer::Failed(absl::StrCat(name_, ": ", why)));
  }

 private:
  // One socket c-ares has open, and the waits armed on it.
  struct Watch {
    explicit Watch(const engines::Executor& strand) : descriptor(strand) {}
    asio::posix::stream_descriptor descriptor;
    bool want_read = false;
    bool want_write = false;
    bool read_armed = false;
    bool write_armed = false;
    bool live = true;  // false once c-ares closed (or is closing) the socket
  };

  // The argument c-ares hands back to OnAnswer.
  struct Query {
    CaresLookupImpl* lookup;
    int type;
    TypeResult result;
  };

  static void OnSocketState(void* data, ares_socket_t fd, int readable, int writable) {
    static_cast<CaresLookupImpl*>(data)->SocketState(fd, readable != 0, writable != 0);
  }

  static void OnAnswer(void* arg, int status, int /*timeouts*/, unsigned char* abuf, int alen) {
    auto* query = static_cast<Query*>(arg);
    query->lookup->Answer(query, status, abuf, alen);
  }

  // Called by c-ares (inside ares_* calls) when a socket opens, changes what
  // it waits for, or is about to be closed (neither readable nor writable).
  void SocketState(int fd, bool readable, bool writable) {
    if (closing_) return;
    auto it = watches_.find(fd);
    if (!readable && !writable) {
      if (it != watches_.end()) {
        Forget(*it->second);
        watches_.erase(it);
      }
      return;
    }
    if (it == watches_.end()) {
      auto watch = std::make_shared<Watch>(strand_);
      boost::system::error_code ec;
      watch->descriptor.assign(fd, ec);
      if (ec) {
        watch->live = false;
        Finish(DnsAnswer::Failed(
            absl::StrCat(name_, ": cannot watch a resolver socket: ", ec.message())));
        return;
      }
      it = watches_.emplace(fd, std::move(watch)).first;
    }
    it->second->want_read = readable;
    it->second->want_write = writable;
    Arm(it->second);
  }

  // The descriptor belongs to c-ares: hand it back (this also ends the
  // waits on it with operation_aborted) instead of closing it.
  static void Forget(Watch& watch) {
    watch.live = false;
    if (watch.descriptor.is_open()) watch.descriptor.release();
  }

  void Arm(const std::shared_ptr<Watch>& watch) {
    if (finished_ || !watch->live) return;
    if (watch->want_read && !watch->read_armed) {
      watch->read_armed = true;
      watch->descriptor.async_wait(
          asio::posix::stream_descriptor::wait_read,
          [self = shared_from_this(), watch](const boost::system::error_code& ec) {
            self->Ready(watch, /*read=*/true, ec);
          });
    }
    if (watch->want_write && !watch->write_armed) {
      watch->write_armed = true;
      watch->descriptor.async_wait(
          asio::posix::stream_descriptor::wait_write,
          [self = shared_from_this(), watch](const boost::system::error_code& ec) {
            self->Ready(watch, /*read=*/false, ec);
          });
    }
  }

  void Ready(const std::shared_ptr<Watch>& watch, bool read, const boost::system::error_code& ec) {
    (read ? watch->read_armed : watch->write_armed) = false;
    if (ec || finished_ || !watch->live) return;
    // Arm again before reading: a datagram that lands between c-ares's last
    // read and a later arm would otherwise wake nobody (the reactor reports
    // edges). A wake-up with nothing to read costs one EAGAIN.
    Arm(watch);
    const int fd = watch->descriptor.native_handle();
    ares_process_fd(channel_, read ? fd : ARES_SOCKET_BAD, read ? ARES_SOCKET_BAD : fd);
    ScheduleTick();
  }

  // Follows ares_timeout(): when it passes, ares_process_fd() with no socket
  // lets c-ares retransmit or give up.
  void ScheduleTick() {
    if (finished_ || channel_ == nullptr) return;
    const uint64_t generation = ++tick_generation_;
    timeval storage = {};
    const timeval* wait = ares_timeout(channel_, nullptr, &storage);
    if (wait == nullptr) {
      tick_.cancel();
      return;
    }
    tick_.expires_after(std::chrono::seconds(wait->tv_sec) +
                        std::chrono::microseconds(wait->tv_usec));
    tick_.async_wait([self = shared_from_this(), generation](const boost::system::error_code& ec) {
      if (ec || self->finished_ || generation != self->tick_generation_) return;
      ares_process_fd(self->channel_, ARES_SOCKET_BAD, ARES_SOCKET_BAD);
      self->ScheduleTick();
    });
  }

  void Answer(Query* query, int status, const unsigned char* abuf, int alen) {
    if (finished_) return;  // cancelled, timed out, or the channel is going away
    if (status == ARES_SUCCESS) {
      query->result = ParseAnswer(query->type, abuf, alen);
    } else {
      query->result.done = true;
      query->result.status = status;
    }
    if (a_.result.done && aaaa_.result.done) Finish(Combine());
  }

  DnsAnswer Combine() const {
    const TypeResult& a = a_.result;
    const TypeResult& aaaa = aaaa_.result;
    const bool a_failed = a.status != ARES_SUCCESS && !IsNoAddress(a.status);
    const bool aaaa_failed = aaaa.status != ARES_SUCCESS && !IsNoAddress(aaaa.status);
    if (a_failed && aaaa_failed) {
      if (a.status == aaaa.status) {
        return DnsAnswer::Failed(absl::StrCat(name_, ": ", DescribeStatus(a.status, options_)));
      }
      return DnsAnswer::Failed(absl::StrCat(name_, ": A: ", DescribeStatus(a.status, options_),
                                            "; AAAA: ", DescribeStatus(aaaa.status, options_)));
    }
    if (a_failed || aaaa_failed) {
      const bool a_side = a_failed;
      return DnsAnswer::Failed(absl::StrCat(
          name_, ": the ", a_side ? "A" : "AAAA", " lookup failed (",
          DescribeStatus(a_side ? a.status : aaaa.status, options_), ") while the ",
          a_side ? "AAAA" : "A", " lookup answered"));
    }
    if (a.overflow || aaaa.overflow) {
      return DnsAnswer::Failed(absl::StrCat(name_, ": the answer has more than ",
                                            kMaxDnsAddresses, " addresses"));
    }
    if (a.addresses.empty() && aaaa.addresses.empty()) {
      const bool nxdomain = a.status == ARES_ENOTFOUND || aaaa.status == ARES_ENOTFOUND;
      return DnsAnswer::NoAddress(
          absl::StrCat(name_, nxdomain ? ": no such name (NXDOMAIN)"
                                       : ": the name has no A or AAAA record (NODATA)"));
    }
    std::vector<std::string> all = a.addresses;
    all.insert(all.end(), aaaa.addresses.begin(), aaaa.addresses.end());
    DnsAnswer answer = DnsAnswer::Addresses(std::move(all));
    if (answer.kind == DnsAnswer::Kind::kFailed) answer.error = absl::StrCat(name_, ": ", answer.error);
    return answer;
  }

  // Delivers `answer` once. The channel is destroyed from a fresh handler:
  // this may run inside a c-ares callback, where ares_destroy() must not.
  void Finish(DnsAnswer answer) {
    if (finished_) return;
    finished_ = true;
    tick_.cancel();
    deadline_.cancel();
    asio::post(strand_, [self = shared_from_this()] { self->CloseChannel(); });
    Done done = std::move(done_);
    done_ = nullptr;
    if (done) done(std::move(answer));
  }

  void CloseChannel() {
    closing_ = true;
    for (auto& [fd, watch] : watches_) Forget(*watch);
    watches_.clear();
    if (channel_ != nullptr) {
      ares_destroy(channel_);  // runs OnAnswer with ARES_EDESTRUCTION: ignored
      channel_ = nullptr;
    }
  }

  const engines::Executor strand_;
  const CaresLookupOptions options_;
  const std::string name_;
  const double timeout_s_;
  Done done_;
  ares_channel channel_ = nullptr;
  absl::flat_hash_map<int, std::shared_ptr<Watch>> watches_;
  asio::steady_timer tick_;
  asio::steady_timer deadline_;
  uint64_t tick_generation_ = 0;
  Query a_{this, ns_t_a, {}};
  Query aaaa_{this, ns_t_aaaa, {}};
  bool finished_ = false;
  bool closing_ = false;
};

}  // namespace

std::shared_ptr<CaresLookup> CaresLookup::Create(const engines::Executor& strand,
                                                 const CaresLookupOptions& options,
                                                 std::string name, double timeout_s, Done done) {
  return std::make_shared<CaresLookupImpl>(strand, options, std::move(name), timeout_s,
                                           std::move(done));
}

}  // namespace narwhal::router
