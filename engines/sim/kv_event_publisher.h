// KvEventPublisher: the simulated engine's KV-cache event stream, as vLLM's
// ZmqEventPublisher sends it (SPEC §14; ../shared/reference/
// vllm-kv-events-and-tokens.md §2-§4). The prefix cache reports every block
// it stores and evicts (BlockSink); a thread of the publisher's own gathers
// them into one KVEventBatch every few milliseconds, numbers it from 0,
// sends [topic, seq, payload] on a PUB socket and keeps the last
// `buffer_steps` batches for replay. A ROUTER socket answers
// [identity, "", start_seq] with every buffered batch from start_seq on as
// [identity, "", topic, seq, payload], then the end marker
// [identity, "", "", -1, ""] (the layout since vLLM PR #45177). Events are
// maps (vLLM >= 0.24) or arrays (<= 0.23).
//
// Faults, for the router's tests: drop the next batches (numbered, never
// sent: a gap the replay can close), restart the sequence at 0 (with the
// buffer emptied), or leave replay requests unanswered.
#ifndef NARWHAL_ENGINES_SIM_KV_EVENT_PUBLISHER_H_
#define NARWHAL_ENGINES_SIM_KV_EVENT_PUBLISHER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "engines/sim/prefix_cache.h"
#include "nlohmann/json.hpp"

namespace narwhal::sim {

struct KvEventOptions {
  std::string host = "127.0.0.1";
  int port = 0;          // the PUB's port; 0 picks a free one
  int replay_port = -1;  // the ROUTER's; 0 picks a free one, -1: none
  bool map_events = true;
  std::string topic;
  int buffer_steps = 10000;
};

class KvEventPublisher : public BlockSink {
 public:
  // Binds both sockets and starts the thread.
  static absl::StatusOr<std::unique_ptr<KvEventPublisher>> Start(KvEventOptions options);
  ~KvEventPublisher() override;  // stops the thread, closes the sockets

  int port() const { return port_; }
  int replay_port() const { return replay_port_; }

  void Stored(const std::vector<uint64_t>& hashes, std::optional<uint64_t> parent,
              std::vector<uint32_t> tokens, uint32_t block_size) override;
  void Removed(uint64_t hash) override;
  void Cleared() override;

  // Faults.
  void DropNext(int batches);
  void RestartSequence();
  void StallReplay(bool stall);
  // {port, replay_port, encoding, next_seq, sent, dropped, replays, ...}.
  nlohmann::json Stats() const;

 private:
  struct Impl;
  explicit KvEventPublisher(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
  int replay_port_ = -1;
};

}  // namespace narwhal::sim

#endif  // NARWHAL_ENGINES_SIM_KV_EVENT_PUBLISHER_H_
