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
#ifndef NARWHAL_ROUTER_PREFIX_INDEX_H_
#define NARWHAL_ROUTER_PREFIX_INDEX_H_

#include <cstddef>
#include <cstdint>
#include <list>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
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
  // Bytes of rendered prompt per chunk (about 16 tokens, vLLM's block size).
  static constexpr size_t kChunkBytes = 64;
  // Chunks hashed per prompt at most (256 KiB of text); a longer prompt's
  // tail is not indexed.
  static constexpr size_t kMaxChunks = 4096;

  explicit PrefixIndex(size_t capacity) : capacity_(capacity) {}

  // The key of `text`. Pure; the same text gives the same key in a process.
  static PromptKey Key(std::string_view text);

  // How many leading chunks of `key` are in the index (0 .. key.chunks.size()).
  size_t Match(const PromptKey& key) const;
  // Records `key`'s chunks as most recently used, evicting beyond capacity.
  void Insert(const PromptKey& key);
  // Forgets everything (the engine's cache is gone).
  void Clear();

  size_t size() const { return map_.size(); }
  size_t capacity() const { return capacity_; }

 private:
  void Touch(uint64_t hash);

  size_t capacity_;
  std::list<uint64_t> lru_;  // front: most recently used
  std::unordered_map<uint64_t, std::list<uint64_t>::iterator> map_;
};

// The text a prompt is indexed by: a completions `prompt` (a string, one
// string in a list, or token ids), or a chat's `messages` (each message's
// role and content parts, with separators so message boundaries count).
// Empty when the body has neither.
std::string PromptText(engines::Api api, const nlohmann::json& body);

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_PREFIX_INDEX_H_
