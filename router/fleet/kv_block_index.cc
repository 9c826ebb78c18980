#include "router/fleet/kv_block_index.h"

#include <type_traits>
#include <utility>
#include <variant>

namespace narwhal::router::kv {
namespace {

// splitmix64's finalizer: every input bit moves every output bit.
uint64_t Mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

bool Indexable(const std::string& medium, int64_t group_idx) {
  return (medium.empty() || medium == "GPU") && group_idx == 0;
}

}  // namespace

ContentKey ChainKey(ContentKey parent, std::span<const uint32_t> tokens) {
  uint64_t h = Mix(parent ^ (0x9e3779b97f4a7c15ULL * (tokens.size() + 1)));
  for (uint32_t t : tokens) h = Mix(h ^ (uint64_t{t} + 0x632be59bd9b4e019ULL));
  return h;
}

KvBlockIndex::KvBlockIndex(KvIndexLimits limits) : limits_(limits) {
  if (limits_.block_size == 0) limits_.block_size = 1;
  if (limits_.max_blocks == 0) limits_.max_blocks = 1;
}

void KvBlockIndex::Apply(const KvEventBatch& batch, KvApplyCounts* counts) {
  for (const KvEvent& e : batch.events) Apply(e, counts);
}

void KvBlockIndex::Apply(const KvEvent& event, KvApplyCounts* counts) {
  std::visit(
      [&](const auto& e) {
        using T = std::decay_t<decltype(e)>;
        if constexpr (std::is_same_v<T, BlockStored>) {
          Store(e, counts);
        } else if constexpr (std::is_same_v<T, BlockRemoved>) {
          Remove(e, counts);
        } else {
          Clear();
          ++counts->cleared;
        }
      },
      event);
}

void KvBlockIndex::Store(const BlockStored& e, KvApplyCounts* counts) {
  const size_t n = e.block_hashes.size();
  const size_t bs = limits_.block_size;
  ContentKey parent = kChainRoot;
  bool ok = Indexable(e.medium, e.group_idx) && e.lora_name.empty() && !e.extra_keys &&
            e.block_size == limits_.block_size && e.token_ids.size() == n * bs;
  if (ok && e.parent) {
    auto p = by_hash_.find(e.parent->bytes);
    if (p == by_hash_.end()) {
      ok = false;  // the chain's position is unknown (its parent was never seen)
    } else {
      parent = p->second.key;
    }
  }
  if (!ok) {
    counts->skipped += static_cast<long long>(n);
    return;
  }
  const std::span<const uint32_t> tokens(e.token_ids);
  for (size_t i = 0; i < n; ++i) {
    const ContentKey key = ChainKey(parent, tokens.subspan(i * bs, bs));
    parent = key;
    auto [it, inserted] = by_hash_.try_emplace(e.block_hashes[i].bytes);
    if (inserted) {
      it->second.key = key;
      order_.push_back(it->first);
      it->second.age = std::prev(order_.end());
      ++by_content_[key];
    } else if (it->second.key != key) {
      // The engine reuses a hash for other content (a collision of its
      // 64-bit form): the newer content is what it holds.
      if (--by_content_[it->second.key] == 0) by_content_.erase(it->second.key);
      it->second.key = key;
      ++by_content_[key];
    }
    ++it->second.refs;
    ++counts->stored;
    while (by_hash_.size() > limits_.max_blocks) {
      Erase(by_hash_.find(order_.front()));
      ++counts->evicted;
    }
  }
}

void KvBlockIndex::Remove(const BlockRemoved& e, KvApplyCounts* counts) {
  for (const EngineBlockHash& h : e.block_hashes) {
    auto it = Indexable(e.medium, e.group_idx) ? by_hash_.find(h.bytes) : by_hash_.end();
    if (it == by_hash_.end()) {
      ++counts->skipped;
      continue;
    }
    ++counts->removed;
    if (--it->second.refs == 0) Erase(it);
  }
}

void KvBlockIndex::Erase(absl::flat_hash_map<std::string, Entry>::iterator it) {
  auto c = by_content_.find(it->second.key);
  if (c != by_content_.end() && --c->second == 0) by_content_.erase(c);
  order_.erase(it->second.age);
  by_hash_.erase(it);
}

void KvBlockIndex::Clear() {
  by_hash_.clear();
  by_content_.clear();
  order_.clear();
}

size_t KvBlockIndex::LeadingBlocks(std::span<const uint32_t> tokens) const {
  const size_t bs = limits_.block_size;
  ContentKey key = kChainRoot;
  size_t held = 0;
  for (size_t i = 0; (i + 1) * bs <= tokens.size(); ++i) {
    key = ChainKey(key, tokens.subspan(i * bs, bs));
    if (!by_content_.contains(key)) break;
    ++held;
  }
  return held;
}

}  // namespace narwhal::router::kv
