// PrefixCache: the simulated engine's prefix cache (vLLM's automatic prefix
// caching). A prompt's text is cut into blocks of kBlockChars (16 tokens at
// the simulator's 4 characters per token); block k is identified by a
// deterministic chain hash of blocks 0..k, so a hit means the whole prefix
// up to it is cached. At most `capacity_blocks` blocks are kept, least
// recently used evicted first. Every locally computed prompt is looked up
// and then stored; the prefill is charged only for what was not cached.
// Thread-safe.
#ifndef NARWHAL_ENGINES_SIM_PREFIX_CACHE_H_
#define NARWHAL_ENGINES_SIM_PREFIX_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <list>
#include <mutex>
#include <string_view>
#include <unordered_map>

#include "nlohmann/json.hpp"

namespace narwhal::sim {

class PrefixCache {
 public:
  static constexpr size_t kBlockChars = 64;

  // 0 blocks: off (nothing is cached, usage carries no details).
  explicit PrefixCache(size_t capacity_blocks) : capacity_(capacity_blocks) {}

  bool enabled() const { return capacity_ > 0; }

  // Looks up `prompt` (of `prompt_tokens` tokens), stores its blocks and
  // returns how many of its tokens were cached: the matched share of the
  // text, and never the last token (it is always computed).
  int LookupAndStore(std::string_view prompt, int prompt_tokens);

  // {enabled, capacity_blocks, blocks, lookups, hits (lookups with a cached
  // token), prompt_tokens, cached_tokens, computed_tokens, hit_rate (cached
  // over prompt tokens)}.
  nlohmann::json Stats() const;
  // Empties the cache and zeroes the counters.
  void Reset();

  // Counters for /metrics.
  int64_t queried_tokens() const;
  int64_t hit_tokens() const;

 private:
  void TouchLocked(uint64_t hash);

  const size_t capacity_;
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
