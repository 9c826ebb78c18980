// KvSubscriber: the router's subscriptions to its engines' KV-cache events
// and the per-engine block indexes they keep (SPEC §14, B26).
//
// One thread of its own (started with the first source), off the request
// path, polls every engine's ZMQ SUB
// socket (vLLM's 3-frame messages [topic, seq, payload]), a socket monitor
// per SUB (a lost connection makes the engine cold), and a DEALER per engine
// while a replay runs (a fresh one per replay: replies of an abandoned
// replay are never read). KvEventStream decides what each message means;
// this class carries it out on the engine's KvBlockIndex. A slow, silent or
// dead publisher costs only its own sockets: nothing here waits on one.
//
// Readers (placement) ask LeadingBlocks() from any thread: the engines'
// table is an immutable snapshot swapped when sources change, and each
// index has its own reader-writer lock, held by the subscriber only while
// it applies one step. An engine that leaves drops its index.
#ifndef NARWHAL_ROUTER_FLEET_KV_SUBSCRIBER_H_
#define NARWHAL_ROUTER_FLEET_KV_SUBSCRIBER_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "engines/snapshot_slot.h"
#include "router/common/clock.h"
#include "router/common/metrics.h"
#include "router/fleet/kv_block_index.h"
#include "router/fleet/kv_block_lookup.h"
#include "router/fleet/kv_event_stream.h"

namespace zmq {
class context_t;
}  // namespace zmq

namespace narwhal::router::kv {

// One engine's event endpoints.
struct KvSource {
  std::string iid;
  std::string endpoint;         // "tcp://host:port" (the engine's PUB)
  std::string replay_endpoint;  // "" when the engine cannot replay
  bool operator==(const KvSource&) const = default;
};

struct KvSubscriberOptions {
  std::string topic;  // kv_events.topic: the SUB's prefix filter
  KvIndexLimits index;
  engines::MonoClock::duration replay_timeout = std::chrono::seconds(2);
  // A stream that starts past batch 0 (a new subscription, a restart, a
  // lost connection) is rebuilt from the engine's replay buffer
  // (router/fleet/kv_event_stream.h).
  bool rebuild = true;
  size_t max_held = 4096;
  KvDecodeLimits decode;
  // How long the thread sleeps in poll when nothing arrives: the pace at
  // which it notices new sources and replay timeouts.
  std::chrono::milliseconds poll_interval{20};
};

// One engine's subscription as the admin API and tests see it.
struct KvSourceStatus {
  KvSource source;
  bool connected = false;  // the SUB has a connection to the publisher
  bool replaying = false;
  size_t blocks = 0;
  std::optional<uint64_t> last_seq;
  long long batches = 0;  // applied
  long long gaps = 0;     // every gap, however it ended
  long long colds = 0;    // times the index was cleared
  std::string last_cold;  // why, the last time
};

class KvSubscriber : public KvBlockLookup {
 public:
  // `metrics` may be null.
  KvSubscriber(const Clock& clock, KvSubscriberOptions options, Metrics* metrics);
  ~KvSubscriber() override;  // Stop()
  KvSubscriber(const KvSubscriber&) = delete;
  KvSubscriber& operator=(const KvSubscriber&) = delete;

  // Makes the subscriptions what `sources` says, by iid: new ones are
  // subscribed, gone ones dropped with their index, a changed endpoint
  // subscribes afresh (cold). Any thread; applied by the subscriber's thread
  // within a poll interval.
  void SetSources(std::vector<KvSource> sources);
  // The engine's cache is gone (it was ejected or restarted by an operator):
  // its index is cleared, as cold.
  void Forget(const std::string& iid, const std::string& why);
  void Stop();

  // --- readers: any thread ---
  // How many of `tokens`' leading blocks engine `iid` holds (0 for an
  // engine without a subscription, or cold).
  size_t LeadingBlocks(const std::string& iid, std::span<const uint32_t> tokens) const override;
  std::optional<KvSourceStatus> Status(const std::string& iid) const;
  std::vector<KvSourceStatus> Statuses() const;

 private:
  struct Engine;
  struct Conn;  // the thread's sockets of one engine
  using Table = std::map<std::string, std::shared_ptr<Engine>>;
  void Run();
  // Pending sources and forgets, on the thread; `conns` are its sockets.
  void ApplyPending(zmq::context_t& context, std::map<std::string, Conn>& conns);
  // Carries out one step of the engine's stream: its index, its replay
  // socket, its counts, metrics and log lines.
  void Carry(zmq::context_t& context, Conn& c, KvStreamStep step);

  const Clock& clock_;
  const KvSubscriberOptions options_;
  Metrics* metrics_;
  engines::SnapshotSlot<Table> table_{std::make_shared<Table>()};

  std::mutex pending_mu_;
  std::optional<std::vector<KvSource>> pending_sources_;
  std::vector<std::pair<std::string, std::string>> pending_forgets_;

  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace narwhal::router::kv

#endif  // NARWHAL_ROUTER_FLEET_KV_SUBSCRIBER_H_
