#include "engines/sim/prefix_cache.h"

#include <algorithm>
#include <vector>

namespace narwhal::sim {
namespace {

// FNV-1a, 64 bits, continued from `seed`: the same text gives the same
// blocks in every process (the simulator is deterministic).
uint64_t Fnv1a(uint64_t seed, std::string_view bytes) {
  uint64_t h = seed;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

constexpr uint64_t kFnvOffset = 14695981039346656037ULL;

}  // namespace

void PrefixCache::TouchLocked(uint64_t hash) {
  auto it = blocks_.find(hash);
  if (it != blocks_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second);
    return;
  }
  lru_.push_front(hash);
  blocks_.emplace(hash, lru_.begin());
}

int PrefixCache::LookupAndStore(std::string_view prompt, int prompt_tokens) {
  if (!enabled() || prompt_tokens <= 0) return 0;
  const size_t n = prompt.size() / kBlockChars;
  std::vector<uint64_t> chain;
  chain.reserve(n);
  uint64_t h = kFnvOffset;
  for (size_t k = 0; k < n; ++k) {
    h = Fnv1a(h, prompt.substr(k * kBlockChars, kBlockChars));
    chain.push_back(h);
  }
  std::lock_guard<std::mutex> lock(mu_);
  size_t matched = 0;
  while (matched < chain.size() && blocks_.count(chain[matched]) != 0) ++matched;
  // Last block first, so a prompt's head stays the most recent.
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) TouchLocked(*it);
  while (blocks_.size() > capacity_) {
    blocks_.erase(lru_.back());
    lru_.pop_back();
  }
  const int64_t share = prompt.empty()
                            ? 0
                            : static_cast<int64_t>(matched) * static_cast<int64_t>(kBlockChars) *
                                  prompt_tokens / static_cast<int64_t>(prompt.size());
  const int cached = static_cast<int>(std::clamp<int64_t>(share, 0, prompt_tokens - 1));
  ++lookups_;
  if (cached > 0) ++hits_;
  prompt_tokens_ += prompt_tokens;
  cached_tokens_ += cached;
  return cached;
}

nlohmann::json PrefixCache::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {{"enabled", enabled()},
          {"capacity_blocks", capacity_},
          {"block_chars", kBlockChars},
          {"blocks", blocks_.size()},
          {"lookups", lookups_},
          {"hits", hits_},
          {"prompt_tokens", prompt_tokens_},
          {"cached_tokens", cached_tokens_},
          {"computed_tokens", prompt_tokens_ - cached_tokens_},
          {"hit_rate", prompt_tokens_ > 0 ? static_cast<double>(cached_tokens_) /
                                                static_cast<double>(prompt_tokens_)
                                          : 0.0}};
}

void PrefixCache::Reset() {
  std::lock_guard<std::mutex> lock(mu_);
  lru_.clear();
  blocks_.clear();
  lookups_ = hits_ = prompt_tokens_ = cached_tokens_ = 0;
}

int64_t PrefixCache::queried_tokens() const {
  std::lock_guard<std::mutex> lock(mu_);
  return prompt_tokens_;
}

int64_t PrefixCache::hit_tokens() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cached_tokens_;
}

}  // namespace narwhal::sim
