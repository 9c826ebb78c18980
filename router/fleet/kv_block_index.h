// KvBlockIndex: the blocks one engine holds in its KV cache, as its event
// stream says (SPEC §14, B26), keyed by token content.
//
// vLLM's block hashes cannot be reproduced outside the engine's Python
// process (../shared/reference/vllm-kv-events-and-tokens.md §6), so a block
// is keyed by its content: ChainKey() of its parent's key and its tokens,
// from the chain's first block on. The engine's hash stays an opaque id for
// parent links and removals. The engine does not deduplicate: the same hash
// stored twice is counted twice and stays until removed twice.
//
// Only what a prompt's tokens alone can match is indexed: GPU blocks (or
// no medium) of group 0, of the configured block size, without extra keys
// (LoRA, cache salt, multimodal) and whose parent is known. Anything else is
// skipped and counted. Every error of this index is an under-estimate (a
// block it does not know), never a block it claims and the engine lacks —
// except after lost events, which the stream (kv_event_stream.h) answers by
// clearing the index.
//
// Memory is bounded: beyond `max_blocks` entries the oldest stored is
// evicted (counted). Not thread-safe: the owner serializes access.
#ifndef NARWHAL_ROUTER_FLEET_KV_BLOCK_INDEX_H_
#define NARWHAL_ROUTER_FLEET_KV_BLOCK_INDEX_H_

#include <absl/container/flat_hash_map.h>

#include <cstddef>
#include <cstdint>
#include <list>
#include <span>
#include <string>

#include "router/fleet/kv_event_decode.h"

namespace narwhal::router::kv {

// A block's content key: its tokens and every block's before it.
using ContentKey = uint64_t;
inline constexpr ContentKey kChainRoot = 0x6e61727768616c31ULL;
ContentKey ChainKey(ContentKey parent, std::span<const uint32_t> tokens);

struct KvIndexLimits {
  uint32_t block_size = 16;      // tokens per block (kv_events.block_size)
  size_t max_blocks = 1u << 18;  // indexed engine blocks, then the oldest go
};

// What applying events did (metrics: narwhal_kv_events_total{kind}).
struct KvApplyCounts {
  long long stored = 0;   // blocks indexed (a duplicate store counts)
  long long removed = 0;  // blocks removed
  long long cleared = 0;  // AllBlocksCleared events
  long long skipped = 0;  // blocks not indexable (see above) or unknown removals
  long long evicted = 0;  // blocks dropped at the memory bound
};

class KvBlockIndex {
 public:
  explicit KvBlockIndex(KvIndexLimits limits = {});

  void Apply(const KvEvent& event, KvApplyCounts* counts);
  void Apply(const KvEventBatch& batch, KvApplyCounts* counts);
  // Forgets every block (the engine is cold).
  void Clear();

  // How many of `tokens`' leading full blocks the engine holds, in a row
  // from the first: O(blocks of the prompt).
  size_t LeadingBlocks(std::span<const uint32_t> tokens) const;

  size_t blocks() const { return by_hash_.size(); }
  uint32_t block_size() const { return limits_.block_size; }

 private:
  struct Entry {
    ContentKey key = 0;
    uint32_t refs = 0;
    std::list<std::string>::iterator age;
  };
  void Store(const BlockStored& e, KvApplyCounts* counts);
  void Remove(const BlockRemoved& e, KvApplyCounts* counts);
  void Erase(absl::flat_hash_map<std::string, Entry>::iterator it);

  KvIndexLimits limits_;
  absl::flat_hash_map<std::string, Entry> by_hash_;       // engine hash bytes
  absl::flat_hash_map<ContentKey, uint32_t> by_content_;  // engine hashes per key
  std::list<std::string> order_;                          // oldest first
};

}  // namespace narwhal::router::kv

#endif  // NARWHAL_ROUTER_FLEET_KV_BLOCK_INDEX_H_
