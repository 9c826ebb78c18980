#include "engines/sim/kv_event_publisher.h"

#include <msgpuck.h>
#include <zmq.h>

#include <chrono>
#include <deque>
#include <string_view>
#include <utility>
#include <variant>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "absl/strings/str_cat.h"
#include "engines/sim/engine_state.h"

namespace narwhal::sim {
namespace {

// How long events gather into one batch (about one scheduler step).
constexpr std::chrono::milliseconds kStep{5};

struct StoredEvent {
  std::vector<uint64_t> hashes;
  std::optional<uint64_t> parent;
  std::vector<uint32_t> tokens;
  uint32_t block_size = 16;
};
struct RemovedEvent {
  uint64_t hash = 0;
};
struct ClearedEvent {};
using Event = std::variant<StoredEvent, RemovedEvent, ClearedEvent>;

// msgpack as msgspec writes a KVEventBatch: [ts, [events...], rank].
class Writer {
 public:
  void Array(uint32_t n) { Put(mp_encode_array(buf_, n)); }
  void Map(uint32_t n) { Put(mp_encode_map(buf_, n)); }
  void Uint(uint64_t v) { Put(mp_encode_uint(buf_, v)); }
  void Double(double v) { Put(mp_encode_double(buf_, v)); }
  void Nil() { Put(mp_encode_nil(buf_)); }
  void Str(std::string_view s) {
    Put(mp_encode_strl(buf_, static_cast<uint32_t>(s.size())));
    out_.append(s);
  }
  // A key of the map form; nothing in the array form.
  void Key(bool map, std::string_view k) {
    if (map) Str(k);
  }
  std::string Take() { return std::move(out_); }

 private:
  void Put(char* end) { out_.append(buf_, end); }
  char buf_[16];
  std::string out_;
};

std::string Encode(const std::vector<Event>& events, bool map) {
  Writer w;
  w.Array(3);
  w.Double(NowSeconds());
  w.Array(static_cast<uint32_t>(events.size()));
  for (const Event& event : events) {
    if (const auto* s = std::get_if<StoredEvent>(&event)) {
      // BlockStored's fields without defaults (vLLM 0.24+ writes each, nil
      // when None; <= 0.23 positionally).
      if (map) {
        w.Map(8);
        w.Str("type");
      } else {
        w.Array(8);
      }
      w.Str("BlockStored");
      w.Key(map, "block_hashes");
      w.Array(static_cast<uint32_t>(s->hashes.size()));
      for (uint64_t h : s->hashes) w.Uint(h);
      w.Key(map, "parent_block_hash");
      if (s->parent) {
        w.Uint(*s->parent);
      } else {
        w.Nil();
      }
      w.Key(map, "token_ids");
      w.Array(static_cast<uint32_t>(s->tokens.size()));
      for (uint32_t t : s->tokens) w.Uint(t);
      w.Key(map, "block_size");
      w.Uint(s->block_size);
      w.Key(map, "lora_id");
      w.Nil();
      w.Key(map, "medium");
      w.Str("GPU");
      w.Key(map, "lora_name");
      w.Nil();
    } else if (const auto* r = std::get_if<RemovedEvent>(&event)) {
      if (map) {
        w.Map(3);
        w.Str("type");
      } else {
        w.Array(3);
      }
      w.Str("BlockRemoved");
      w.Key(map, "block_hashes");
      w.Array(1);
      w.Uint(r->hash);
      w.Key(map, "medium");
      w.Str("GPU");
    } else {
      if (map) {
        w.Map(1);
        w.Str("type");
      } else {
        w.Array(1);
      }
      w.Str("AllBlocksCleared");
    }
  }
  w.Uint(0);  // data_parallel_rank
  return w.Take();
}

std::string Seq(uint64_t v) {
  std::string out(8, '\0');
  for (int i = 7; i >= 0; --i) {
    out[static_cast<size_t>(i)] = static_cast<char>(v & 0xff);
    v >>= 8;
  }
  return out;
}

int PortOf(zmq::socket_t& socket) {
  const std::string endpoint = socket.get(zmq::sockopt::last_endpoint);
  return std::stoi(endpoint.substr(endpoint.rfind(':') + 1));
}

}  // namespace

struct KvEventPublisher::Impl {
  explicit Impl(KvEventOptions o) : options(std::move(o)) {}
  const KvEventOptions options;
  zmq::context_t ctx{1};
  zmq::socket_t pub{ctx, zmq::socket_type::pub};
  std::optional<zmq::socket_t> router;
  std::thread thread;
  std::atomic<bool> stop{false};

  std::mutex mu;  // what follows
  std::vector<Event> pending;
  int drop_next = 0;
  bool restart = false;
  bool stall_replay = false;
  // The thread's (read by Stats under mu).
  uint64_t next_seq = 0;
  std::deque<std::pair<uint64_t, std::string>> buffer;
  int64_t sent = 0;
  int64_t dropped = 0;
  int64_t replays = 0;
  int64_t replays_stalled = 0;

  void Run();
  void Answer(std::vector<zmq::message_t>& request);
};

void KvEventPublisher::Impl::Answer(std::vector<zmq::message_t>& request) {
  // [identity, "", start_seq]; vLLM ignores anything else.
  if (request.size() != 3 || request[2].size() != 8) return;
  uint64_t start = 0;
  for (unsigned char c : request[2].to_string_view()) start = (start << 8) | c;
  std::vector<std::pair<uint64_t, std::string>> batches;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (stall_replay) {
      ++replays_stalled;
      return;
    }
    ++replays;
    for (const auto& [seq, payload] : buffer) {
      if (seq >= start) batches.emplace_back(seq, payload);
    }
  }
  const std::string identity = request[0].to_string();
  for (const auto& [seq, payload] : batches) {
    const std::string seq_frame = Seq(seq);
    std::vector<zmq::const_buffer> frames = {zmq::buffer(identity), zmq::buffer("", 0),
                                             zmq::buffer(options.topic), zmq::buffer(seq_frame),
                                             zmq::buffer(payload)};
    zmq::send_multipart(*router, frames, zmq::send_flags::dontwait);
  }
  const std::string end = Seq(~uint64_t{0});
  std::vector<zmq::const_buffer> frames = {zmq::buffer(identity), zmq::buffer("", 0),
                                           zmq::buffer("", 0), zmq::buffer(end),
                                           zmq::buffer("", 0)};
  zmq::send_multipart(*router, frames, zmq::send_flags::dontwait);
}

void KvEventPublisher::Impl::Run() {
  while (!stop.load()) {
    std::vector<zmq::pollitem_t> items;
    if (router) items.push_back({router->handle(), 0, ZMQ_POLLIN, 0});
    try {
      if (items.empty()) {
        std::this_thread::sleep_for(kStep);
      } else {
        zmq::poll(items, kStep);
      }
      if (!items.empty() && (items[0].revents & ZMQ_POLLIN) != 0) {
        std::vector<zmq::message_t> request;
        if (zmq::recv_multipart(*router, std::back_inserter(request), zmq::recv_flags::dontwait)) {
          Answer(request);
        }
      }
    } catch (const zmq::error_t&) {
      continue;  // EINTR; the sockets close only when the thread ends
    }
    std::vector<Event> events;
    uint64_t seq = 0;
    bool drop = false;
    std::string payload;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (restart) {
        restart = false;
        next_seq = 0;
        buffer.clear();
      }
      if (pending.empty()) continue;
      events.swap(pending);
      seq = next_seq++;
      payload = Encode(events, options.map_events);
      buffer.emplace_back(seq, payload);
      while (buffer.size() > static_cast<size_t>(options.buffer_steps)) buffer.pop_front();
      if (drop_next > 0) {
        --drop_next;
        ++dropped;
        drop = true;
      } else {
        ++sent;
      }
    }
    if (drop) continue;
    const std::string seq_frame = Seq(seq);
    std::vector<zmq::const_buffer> frames = {zmq::buffer(options.topic), zmq::buffer(seq_frame),
                                             zmq::buffer(payload)};
    try {
      zmq::send_multipart(pub, frames, zmq::send_flags::dontwait);
    } catch (const zmq::error_t&) {
      // A PUB never blocks; beyond its high-water mark it drops, as vLLM's.
    }
  }
}

absl::StatusOr<std::unique_ptr<KvEventPublisher>> KvEventPublisher::Start(KvEventOptions options) {
  auto impl = std::make_unique<Impl>(std::move(options));
  const KvEventOptions& o = impl->options;
  try {
    impl->pub.set(zmq::sockopt::linger, 0);
    impl->pub.bind(absl::StrCat("tcp://", o.host, ":", o.port == 0 ? "*" : std::to_string(o.port)));
    if (o.replay_port >= 0) {
      impl->router.emplace(impl->ctx, zmq::socket_type::router);
      impl->router->set(zmq::sockopt::linger, 0);
      // A replay request is three small frames: anything larger is refused
      // by ZeroMQ before it is buffered.
      impl->router->set(zmq::sockopt::maxmsgsize, int64_t{1024});
      impl->router->bind(absl::StrCat("tcp://", o.host, ":",
                                      o.replay_port == 0 ? "*" : std::to_string(o.replay_port)));
    }
  } catch (const zmq::error_t& e) {
    return absl::UnavailableError(absl::StrCat("cannot bind the KV-event sockets on ", o.host,
                                               " (port ", o.port, ", replay port ", o.replay_port,
                                               "): ", e.what()));
  }
  auto publisher = std::unique_ptr<KvEventPublisher>(new KvEventPublisher(std::move(impl)));
  publisher->port_ = PortOf(publisher->impl_->pub);
  publisher->replay_port_ = publisher->impl_->router ? PortOf(*publisher->impl_->router) : -1;
  Impl* raw = publisher->impl_.get();
  raw->thread = std::thread([raw] { raw->Run(); });
  return publisher;
}

KvEventPublisher::KvEventPublisher(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

KvEventPublisher::~KvEventPublisher() {
  impl_->stop = true;
  if (impl_->thread.joinable()) impl_->thread.join();
}

void KvEventPublisher::Stored(const std::vector<uint64_t>& hashes, std::optional<uint64_t> parent,
                              std::vector<uint32_t> tokens, uint32_t block_size) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->pending.emplace_back(StoredEvent{hashes, parent, std::move(tokens), block_size});
}

void KvEventPublisher::Removed(uint64_t hash) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->pending.emplace_back(RemovedEvent{hash});
}

void KvEventPublisher::Cleared() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->pending.emplace_back(ClearedEvent{});
}

void KvEventPublisher::DropNext(int batches) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->drop_next += batches;
}

void KvEventPublisher::RestartSequence() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->restart = true;
  impl_->pending.clear();  // what a restarted engine never sends
}

void KvEventPublisher::StallReplay(bool stall) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->stall_replay = stall;
}

nlohmann::json KvEventPublisher::Stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return {{"port", port_},
          {"replay_port", replay_port_},
          {"encoding", impl_->options.map_events ? "map" : "array"},
          {"topic", impl_->options.topic},
          {"next_seq", impl_->next_seq},
          {"sent", impl_->sent},
          {"dropped", impl_->dropped},
          {"buffered", impl_->buffer.size()},
          {"pending", impl_->pending.size()},
          {"replays", impl_->replays},
          {"replays_stalled", impl_->replays_stalled},
          {"stall_replay", impl_->stall_replay},
          {"drop_next", impl_->drop_next}};
}

}  // namespace narwhal::sim
