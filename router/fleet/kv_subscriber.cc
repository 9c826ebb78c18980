#include "router/fleet/kv_subscriber.h"

#include <absl/strings/str_cat.h>
#include <zmq.h>

#include <cstring>
#include <string_view>
#include <utility>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "router/common/log.h"

namespace narwhal::router::kv {
namespace {

// Messages read from one socket per poll round (the others get their turn).
constexpr int kMaxPerRound = 256;

std::vector<std::string_view> Views(const std::vector<zmq::message_t>& frames) {
  std::vector<std::string_view> out;
  out.reserve(frames.size());
  for (const zmq::message_t& f : frames) out.emplace_back(f.data<char>(), f.size());
  return out;
}

}  // namespace

struct KvSubscriber::Engine {
  explicit Engine(KvSource s, const KvSubscriberOptions& o)
      : source(std::move(s)),
        index(o.index),
        stream(KvStreamOptions{.can_replay = !source.replay_endpoint.empty(),
                               .rebuild = o.rebuild,
                               .replay_timeout = o.replay_timeout,
                               .max_held = o.max_held,
                               .decode = o.decode}) {}
  const KvSource source;
  mutable std::shared_mutex mu;  // index and the status below
  KvBlockIndex index;
  bool connected = false;
  bool replaying = false;
  std::optional<uint64_t> last_seq;
  long long batches = 0;
  long long gaps = 0;
  long long colds = 0;
  std::string last_cold;
  KvEventStream stream;  // the thread's only
};

struct KvSubscriber::Conn {
  std::shared_ptr<Engine> engine;
  std::unique_ptr<zmq::socket_t> sub;
  std::unique_ptr<zmq::socket_t> monitor;
  std::unique_ptr<zmq::socket_t> dealer;  // while a replay runs
};

KvSubscriber::KvSubscriber(const Clock& clock, KvSubscriberOptions options, Metrics* metrics)
    : clock_(clock), options_(std::move(options)), metrics_(metrics) {}

KvSubscriber::~KvSubscriber() { Stop(); }

void KvSubscriber::Stop() {
  std::thread thread;
  {
    std::lock_guard<std::mutex> lock(pending_mu_);
    stop_ = true;
    thread = std::move(thread_);
  }
  if (thread.joinable()) thread.join();  // the thread takes pending_mu_ itself
}

void KvSubscriber::SetSources(std::vector<KvSource> sources) {
  std::lock_guard<std::mutex> lock(pending_mu_);
  if (stop_) return;
  // The thread starts with the first source: a fleet without KV events
  // costs nothing.
  if (!thread_.joinable() && !sources.empty()) thread_ = std::thread([this] { Run(); });
  pending_sources_ = std::move(sources);
}

void KvSubscriber::Forget(const std::string& iid, const std::string& why) {
  std::lock_guard<std::mutex> lock(pending_mu_);
  pending_forgets_.emplace_back(iid, why);
}

size_t KvSubscriber::LeadingBlocks(const std::string& iid, std::span<const uint32_t> tokens) const {
  const std::shared_ptr<const Table> table = table_.Get();
  auto it = table->find(iid);
  if (it == table->end()) return 0;
  std::shared_lock lock(it->second->mu);
  return it->second->index.LeadingBlocks(tokens);
}

std::optional<KvSourceStatus> KvSubscriber::Status(const std::string& iid) const {
  const std::shared_ptr<const Table> table = table_.Get();
  auto it = table->find(iid);
  if (it == table->end()) return std::nullopt;
  const Engine& e = *it->second;
  std::shared_lock lock(e.mu);
  return KvSourceStatus{.source = e.source,
                        .connected = e.connected,
                        .replaying = e.replaying,
                        .blocks = e.index.blocks(),
                        .last_seq = e.last_seq,
                        .batches = e.batches,
                        .gaps = e.gaps,
                        .colds = e.colds,
                        .last_cold = e.last_cold};
}

std::vector<KvSourceStatus> KvSubscriber::Statuses() const {
  std::vector<KvSourceStatus> out;
  for (const auto& [iid, e] : *table_.Get()) {
    if (std::optional<KvSourceStatus> s = Status(iid)) out.push_back(*std::move(s));
  }
  return out;
}

void KvSubscriber::Carry(zmq::context_t& context, Conn& c, KvStreamStep step) {
  Engine& e = *c.engine;
  const std::string& iid = e.source.iid;
  {
    // Metrics too are set under the lock: a reader that sees the index
    // change sees its counts.
    std::unique_lock lock(e.mu);
    KvApplyCounts counts;
    long long unknown = 0;
    if (step.clear) {
      e.index.Clear();
      ++e.colds;
      e.last_cold = step.detail;
    }
    for (const KvEventBatch& b : step.apply) {
      e.index.Apply(b, &counts);
      unknown += b.unknown_events;
      ++e.batches;
    }
    if (step.gap) ++e.gaps;
    e.replaying = e.stream.replaying();
    e.last_seq = e.stream.last_seq();
    if (metrics_ != nullptr) {
      metrics_->kv_index_blocks.Add({{"iid", iid}}).Set(static_cast<double>(e.index.blocks()));
      if (step.gap) {
        metrics_->kv_event_gaps_total.Add({{"iid", iid}, {"outcome", GapOutcomeName(*step.gap)}})
            .Increment();
      }
      const std::pair<const char*, long long> kinds[] = {
          {"stored", counts.stored},   {"removed", counts.removed}, {"cleared", counts.cleared},
          {"skipped", counts.skipped}, {"evicted", counts.evicted}, {"unknown", unknown}};
      for (const auto& [kind, n] : kinds) {
        if (n > 0) {
          metrics_->kv_events_total.Add({{"iid", iid}, {"kind", kind}})
              .Increment(static_cast<double>(n));
        }
      }
    }
  }
  if (step.replay_from) {
    // A fresh DEALER per replay: replies to an abandoned one are never read.
    try {
      c.dealer = std::make_unique<zmq::socket_t>(context, zmq::socket_type::dealer);
      c.dealer->set(zmq::sockopt::linger, 0);
      c.dealer->set(zmq::sockopt::maxmsgsize,
                    static_cast<int64_t>(options_.decode.max_payload_bytes + 4096));
      c.dealer->connect(e.source.replay_endpoint);
      const std::vector<std::string> request = ReplayRequest(*step.replay_from);
      for (size_t i = 0; i < request.size(); ++i) {
        c.dealer->send(zmq::buffer(request[i]),
                       i + 1 < request.size() ? zmq::send_flags::sndmore | zmq::send_flags::dontwait
                                              : zmq::send_flags::dontwait);
      }
      LogInfo(absl::StrCat("kv events of ", iid, ": ", step.detail));
    } catch (const zmq::error_t& err) {
      c.dealer.reset();
      LogWarning(absl::StrCat("kv events of ", iid, ": cannot ask ", e.source.replay_endpoint,
                              " for a replay: ", err.what()));
      // The timeout makes it cold.
    }
  }
  if (!e.stream.replaying()) c.dealer.reset();
  if (step.gap) {
    const std::string outcome = GapOutcomeName(*step.gap);
    if (*step.gap == GapOutcome::kReplayed) {
      LogInfo(absl::StrCat("kv events of ", iid, ": gap closed, ", step.detail));
    } else {
      LogWarning(absl::StrCat("kv events of ", iid, ": cold (", outcome,
                              "), index cleared: ", step.detail));
    }
  }
}

void KvSubscriber::ApplyPending(zmq::context_t& ctx, std::map<std::string, Conn>& conns) {
  std::optional<std::vector<KvSource>> sources;
  std::vector<std::pair<std::string, std::string>> forgets;
  {
    std::lock_guard<std::mutex> lock(pending_mu_);
    sources.swap(pending_sources_);
    forgets.swap(pending_forgets_);
  }
  if (sources) {
    std::map<std::string, KvSource> wanted;
    for (KvSource& s : *sources) wanted[s.iid] = std::move(s);
    bool changed = false;
    for (auto it = conns.begin(); it != conns.end();) {
      auto w = wanted.find(it->first);
      if (w == wanted.end() || !(w->second == it->second.engine->source)) {
        LogInfo(absl::StrCat("kv events of ", it->first, ": unsubscribed from ",
                             it->second.engine->source.endpoint, ", index dropped"));
        if (metrics_ != nullptr)
          metrics_->kv_index_blocks.Remove(&metrics_->kv_index_blocks.Add({{"iid", it->first}}));
        it = conns.erase(it);
        changed = true;
      } else {
        ++it;
      }
    }
    for (auto& [iid, source] : wanted) {
      if (conns.contains(iid)) continue;
      Conn c;
      c.engine = std::make_shared<Engine>(source, options_);
      try {
        c.sub = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::sub);
        c.sub->set(zmq::sockopt::linger, 0);
        c.sub->set(zmq::sockopt::maxmsgsize,
                   static_cast<int64_t>(options_.decode.max_payload_bytes + 4096));
        c.sub->set(zmq::sockopt::subscribe, options_.topic);
        const std::string monitor_addr = absl::StrCat("inproc://kv-monitor-", iid, "-",
                                                      reinterpret_cast<uintptr_t>(c.engine.get()));
        if (zmq_socket_monitor(c.sub->handle(), monitor_addr.c_str(),
                               ZMQ_EVENT_CONNECTED | ZMQ_EVENT_DISCONNECTED) != 0) {
          throw zmq::error_t();
        }
        c.monitor = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::pair);
        c.monitor->set(zmq::sockopt::linger, 0);
        c.monitor->connect(monitor_addr);
        c.sub->connect(source.endpoint);
      } catch (const zmq::error_t& e) {
        LogWarning(absl::StrCat("kv events of ", iid, ": cannot subscribe to ", source.endpoint,
                                ": ", e.what(), " (the engine stays cold)"));
        continue;
      }
      LogInfo(absl::StrCat("kv events of ", iid, ": subscribed to ", source.endpoint,
                           source.replay_endpoint.empty()
                               ? std::string(" (no replay endpoint)")
                               : absl::StrCat(", replay ", source.replay_endpoint)));
      conns.emplace(iid, std::move(c));
      changed = true;
    }
    if (changed) {
      auto table = std::make_shared<Table>();
      for (const auto& [iid, c] : conns) table->emplace(iid, c.engine);
      table_.Publish(std::move(table));
    }
  }
  for (const auto& [iid, why] : forgets) {
    auto it = conns.find(iid);
    if (it == conns.end()) continue;
    Carry(ctx, it->second, it->second.engine->stream.OnLost(why));
  }
}

void KvSubscriber::Run() {
  zmq::context_t ctx(1);
  std::map<std::string, Conn> conns;
  // What a poll item stands for.
  enum class What { kSub, kMonitor, kDealer };
  struct Item {
    Conn* conn;
    What what;
  };
  while (!stop_.load()) {
    ApplyPending(ctx, conns);
    std::vector<zmq::pollitem_t> items;
    std::vector<Item> whats;
    for (auto& [iid, c] : conns) {
      items.push_back({c.sub->handle(), 0, ZMQ_POLLIN, 0});
      whats.push_back({&c, What::kSub});
      items.push_back({c.monitor->handle(), 0, ZMQ_POLLIN, 0});
      whats.push_back({&c, What::kMonitor});
      if (c.dealer) {
        items.push_back({c.dealer->handle(), 0, ZMQ_POLLIN, 0});
        whats.push_back({&c, What::kDealer});
      }
    }
    try {
      zmq::poll(items, options_.poll_interval);
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) LogWarning(absl::StrCat("kv events: poll failed: ", e.what()));
      continue;
    }
    for (size_t i = 0; i < items.size(); ++i) {
      if ((items[i].revents & ZMQ_POLLIN) == 0) continue;
      Conn& c = *whats[i].conn;
      Engine& e = *c.engine;
      for (int n = 0; n < kMaxPerRound; ++n) {
        zmq::socket_t* s = whats[i].what == What::kSub       ? c.sub.get()
                           : whats[i].what == What::kMonitor ? c.monitor.get()
                                                             : c.dealer.get();
        if (s == nullptr) break;  // the dealer was closed by a step below
        std::vector<zmq::message_t> frames;
        std::optional<size_t> got;
        try {
          got = zmq::recv_multipart(*s, std::back_inserter(frames), zmq::recv_flags::dontwait);
        } catch (const zmq::error_t& err) {
          LogWarning(absl::StrCat("kv events of ", e.source.iid, ": receive failed: ", err.what()));
          break;
        }
        if (!got) break;
        const std::vector<std::string_view> v = Views(frames);
        switch (whats[i].what) {
          case What::kSub:
            Carry(ctx, c,
                  v.size() == 3 ? e.stream.OnLive(v[1], v[2], clock_.Now())
                                : e.stream.OnLive("", "", clock_.Now()));
            break;
          case What::kMonitor: {
            uint16_t event = 0;
            if (!v.empty() && v[0].size() >= sizeof(event)) {
              std::memcpy(&event, v[0].data(), sizeof(event));
            }
            if (event == ZMQ_EVENT_CONNECTED) {
              std::unique_lock lock(e.mu);
              e.connected = true;
              LogInfo(absl::StrCat("kv events of ", e.source.iid, ": connected to ",
                                   e.source.endpoint));
            } else if (event == ZMQ_EVENT_DISCONNECTED) {
              {
                std::unique_lock lock(e.mu);
                e.connected = false;
              }
              Carry(ctx, c,
                    e.stream.OnLost(
                        absl::StrCat("the connection to ", e.source.endpoint, " was lost")));
            }
            break;
          }
          case What::kDealer:
            Carry(ctx, c, e.stream.OnReplay(v));
            break;
        }
      }
    }
    const engines::MonoTime now = clock_.Now();
    for (auto& [iid, c] : conns) {
      Engine& e = *c.engine;
      if (KvStreamStep step = e.stream.OnTick(now); step.gap) Carry(ctx, c, std::move(step));
    }
  }
  conns.clear();  // sockets close before the context
}

}  // namespace narwhal::router::kv
