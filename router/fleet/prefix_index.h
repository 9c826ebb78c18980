// PrefixIndex: an approximate record of the prompt prefixes one producer
// prefilled recently, so placement can send a prompt where its prefix is
// probably still in the engine's KV cache. No tokenizer: the prompt is the
// rendered text (PromptText), cut into fixed chunks of kChunkBytes; chunk k
// is identified by a chain hash of chunks 0..k, so a hit on chunk k means the
// whole prefix up to it was seen. A trailing partial chunk is never indexed
// (engines cache whole blocks too).
//
// Bounded memory: at most `capacity` chunk hashes, least recently used
// evicted first; every Insert() refreshes the prompt's chunks. Pure logic,
// not thread-safe (the Fleet holds it under its mutex).
#ifndef NARWHAL_ROUTER_FLEET_PREFIX_INDEX_H_
#define NARWHAL_ROUTER_FLEET_PREFIX_INDEX_H_

#include <absl/container/flat_hash_map.h>

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "engines/api.h"

namespace narwhal::router {

// The chain hashes of a prompt's whole chunks, in order, and the length of
// the text they were cut from.
struct PromptKey {
  std::vector<uint64_t> chunks;
  size_t text_bytes = 0;
};

class PrefixIndex {
 public:
  // Bytes of rendered prompt per chunk (about 64 tokens: coarse enough that
  // indexing a prompt stays cheap, fine enough for placement).
  static constexpr size_t kChunkBytes = 256;
  // Chunks hashed per prompt at most (256 KiB of text); a longer prompt's
  // tail is not indexed.
  static constexpr size_t kMaxChunks = 4096;

  explicit PrefixIndex(size_t capacity) : capacity_(capacity) {}

  // The key of `text`. Pure; the same text gives the same key in a process.
  static PromptKey Key(std::string_view text);

  // How many leading chunks of `key` are in the index (0 .. key.chunks.size()).
  // A binary search: a chunk is never more recent than the chunks before it
  // (Insert touches a prompt's chunks last to first), so LRU eviction keeps
  // every indexed prefix whole.
  size_t Match(const PromptKey& key) const;
  // Records `key`'s chunks as most recently used, evicting beyond capacity.
  void Insert(const PromptKey& key);
  // Forgets everything (the engine's cache is gone).
  void Clear();

  size_t size() const { return map_.size(); }
  size_t capacity() const { return capacity_; }

 private:
  static constexpr uint32_t kNone = UINT32_MAX;
  // One entry of the recency list, kept in slots_ (no allocation per entry).
  struct Slot {
    uint64_t hash = 0;
    uint32_t prev = kNone;  // towards the most recent
    uint32_t next = kNone;  // towards the least recent
  };
  void Touch(uint64_t hash);
  void Unlink(uint32_t s);
  void PushFront(uint32_t s);

  size_t capacity_;
  std::vector<Slot> slots_;
  uint32_t head_ = kNone;                        // most recently used
  uint32_t tail_ = kNone;                        // least recently used
  absl::flat_hash_map<uint64_t, uint32_t> map_;  // chunk hash -> slot
};

// The text a prompt is indexed by: a completions `prompt` (a string, one
// string in a list, or token ids), or a chat's `messages` (each message's
// role and content parts, with separators so message boundaries count).
// Empty when the body has neither.
std::string PromptText(engines::Api api, const nlohmann::json& body);

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_FLEET_PREFIX_INDEX_H_
