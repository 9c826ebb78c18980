#include "engines/sim/prefix_cache.h"

#include <algorithm>
#include <vector>

#include "engines/sim/sim_tokenizer.h"

namespace narwhal::sim {
namespace {

// FNV-1a, 64 bits, over the 4 little-endian bytes of each id, continued
// from `seed`: the same ids give the same blocks in every process (the
// simulator is deterministic).
uint64_t Fnv1a(uint64_t seed, const uint32_t* ids, size_t count) {
  uint64_t h = seed;
  for (size_t i = 0; i < count; ++i) {
    for (int shift = 0; shift < 32; shift += 8) {
      h ^= (ids[i] >> shift) & 0xffU;
      h *= 1099511628211ULL;
    }
  }
  return h;
}

constexpr uint64_t kFnvOffset = 14695981039346656037ULL;

}  // namespace

size_t PrefixCache::StoreLocked(const std::vector<uint32_t>& ids) {
  const size_t block = static_cast<size_t>(block_tokens_);
  const size_t n = ids.size() / block;
  std::vector<uint64_t> chain;
  chain.reserve(n);
  uint64_t h = kFnvOffset;
  for (size_t k = 0; k < n; ++k) {
    h = Fnv1a(h, ids.data() + k * block, block);
    chain.push_back(h);
  }
  size_t matched = 0;
  while (matched < chain.size() && blocks_.count(chain[matched]) != 0) ++matched;
  // Runs of blocks new to the cache, each one stored event.
  if (sink_ != nullptr) {
    for (size_t k = 0; k < n;) {
      if (blocks_.count(chain[k]) != 0) {
        ++k;
        continue;
      }
      const size_t start = k;
      while (k < n && blocks_.count(chain[k]) == 0) ++k;
      sink_->Stored(std::vector<uint64_t>(chain.begin() + static_cast<std::ptrdiff_t>(start),
                                          chain.begin() + static_cast<std::ptrdiff_t>(k)),
                    start == 0 ? std::nullopt : std::optional<uint64_t>(chain[start - 1]),
                    std::vector<uint32_t>(ids.begin() + static_cast<std::ptrdiff_t>(start * block),
                                          ids.begin() + static_cast<std::ptrdiff_t>(k * block)),
                    static_cast<uint32_t>(block_tokens_));
    }
  }
  // Last block first, so a prompt's head stays the most recent.
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    auto found = blocks_.find(*it);
    if (found != blocks_.end()) {
      lru_.splice(lru_.begin(), lru_, found->second);
    } else {
      lru_.push_front(*it);
      blocks_.emplace(*it, lru_.begin());
    }
  }
  while (blocks_.size() > capacity_) {
    if (sink_ != nullptr) sink_->Removed(lru_.back());
    blocks_.erase(lru_.back());
    lru_.pop_back();
  }
  return matched;
}

int PrefixCache::LookupAndStore(const std::vector<uint32_t>& ids, int prompt_tokens) {
  if (!enabled() || prompt_tokens <= 0) return 0;
  std::lock_guard<std::mutex> lock(mu_);
  const size_t matched = StoreLocked(ids);
  const int64_t share = ids.empty() ? 0
                                    : static_cast<int64_t>(matched) * block_tokens_ *
                                          prompt_tokens / static_cast<int64_t>(ids.size());
  const int cached = static_cast<int>(std::clamp<int64_t>(share, 0, prompt_tokens - 1));
  ++lookups_;
  if (cached > 0) ++hits_;
  prompt_tokens_ += prompt_tokens;
  cached_tokens_ += cached;
  return cached;
}

int PrefixCache::LookupAndStore(std::string_view prompt, int prompt_tokens) {
  if (!enabled() || prompt_tokens <= 0) return 0;
  return LookupAndStore(SimTokenize(prompt), prompt_tokens);
}

void PrefixCache::StoreBlocks(const std::vector<uint32_t>& ids) {
  if (!enabled()) return;
  std::lock_guard<std::mutex> lock(mu_);
  StoreLocked(ids);
}

void PrefixCache::StoreBlocks(std::string_view prompt) {
  if (!enabled()) return;
  StoreBlocks(SimTokenize(prompt));
}

nlohmann::json PrefixCache::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {{"enabled", enabled()},
          {"capacity_blocks", capacity_},
          {"block_chars", block_chars_},
          {"block_tokens", block_tokens_},
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

void PrefixCache::Reset(bool announce) {
  std::lock_guard<std::mutex> lock(mu_);
  if (announce && sink_ != nullptr && !blocks_.empty()) sink_->Cleared();
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
