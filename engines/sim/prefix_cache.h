// PrefixCache: the simulated engine's prefix cache (vLLM's automatic prefix
// caching). A prompt's token ids (engines/sim/text_gen.h) are cut into
// blocks of `block_tokens` ids; block k is identified by a deterministic
// chain hash of blocks 0..k (FNV-1a over each id's 4 little-endian bytes,
// continued from block k-1's hash), so a hit means the whole prefix up to it
// is cached. A text is looked up by SimTokenize(text): one id per 4
// characters, so a block is 4 x block_tokens characters. At most `capacity_blocks` blocks are kept,
// least recently used evicted first. Every locally computed prompt is looked up and then stored;
// the prefill is charged only for what was not cached. A consumer that pulled a prompt's KV stores
// its blocks too (StoreBlocks). Every block stored anew and every block evicted is told to the sink
// (the KV-event publisher), in order, as vLLM's block pool does. Thread-safe.
#ifndef NARWHAL_ENGINES_SIM_PREFIX_CACHE_H_
#define NARWHAL_ENGINES_SIM_PREFIX_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <list>
#include <mutex>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "nlohmann/json.hpp"

namespace narwhal::sim {

// Who hears of blocks stored and evicted (called under the cache's lock:
// quick, and never calling back).
class BlockSink {
 public:
  virtual ~BlockSink() = default;
  // Blocks newly cached, in chain order; `parent`: the block before the
  // first (unset at the chain's start); `tokens`: theirs, block after block.
  virtual void Stored(const std::vector<uint64_t>& hashes, std::optional<uint64_t> parent,
                      std::vector<uint32_t> tokens, uint32_t block_size) = 0;
  virtual void Removed(uint64_t hash) = 0;
  virtual void Cleared() = 0;
};

class PrefixCache {
 public:
  // 0 blocks: off (nothing is cached, usage carries no details).
  explicit PrefixCache(size_t capacity_blocks, int block_tokens = 16)
      : capacity_(capacity_blocks),
        block_tokens_(block_tokens > 0 ? block_tokens : 16),
        block_chars_(static_cast<size_t>(block_tokens_) * 4) {}

  bool enabled() const { return capacity_ > 0; }
  size_t block_chars() const { return block_chars_; }
  // Set before the engine serves.
  void SetSink(BlockSink* sink) { sink_ = sink; }

  // Looks up the prompt `ids` (of `prompt_tokens` tokens), stores its
  // blocks and returns how many of its tokens were cached: the matched share
  // of the ids, and never the last token (it is always computed).
  int LookupAndStore(const std::vector<uint32_t>& ids, int prompt_tokens);
  // The same for a text: its ids are SimTokenize(prompt).
  int LookupAndStore(std::string_view prompt, int prompt_tokens);
  // Stores the blocks of `ids` without a lookup (KV pulled from a producer,
  // a completed generation).
  void StoreBlocks(const std::vector<uint32_t>& ids);
  void StoreBlocks(std::string_view prompt);

  // {enabled, capacity_blocks, blocks, lookups, hits (lookups with a cached
  // token), prompt_tokens, cached_tokens, computed_tokens, hit_rate (cached
  // over prompt tokens)}.
  nlohmann::json Stats() const;
  // Empties the cache and zeroes the counters; `announce`: tell the sink
  // (AllBlocksCleared, vLLM's reset_prefix_cache), else silently (the
  // engine restarted).
  void Reset(bool announce = true);

  // Counters for /metrics.
  int64_t queried_tokens() const;
  int64_t hit_tokens() const;

 private:
  // Stores the chain of the full blocks of `ids`; returns how many of them
  // were cached, from the first, before.
  size_t StoreLocked(const std::vector<uint32_t>& ids);

  const size_t capacity_;
  const int block_tokens_;
  const size_t block_chars_;
  BlockSink* sink_ = nullptr;
  mutable std::mutex mu_;
  std::list<uint64_t> lru_;  // front: most recent
  std::unordered_map<uint64_t, std::list<uint64_t>::iterator> blocks_;
  int64_t lookups_ = 0;
  int64_t hits_ = 0;
  int64_t prompt_tokens_ = 0;
  int64_t cached_tokens_ = 0;
};

}  // namespace narwhal::sim

#endif  // NARWHAL_ENGINES_SIM_PREFIX_CACHE_H_
