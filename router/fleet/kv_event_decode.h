// KV-cache events of vLLM engines as they come off the wire (SPEC §14, B26):
// the msgpack payload of one KVEventBatch, and the sequence and replay
// frames around it (../shared/reference/vllm-kv-events-and-tokens.md §2-§4).
//
// Every live shape is accepted, told apart by msgpack type and frame count,
// not by version: the batch envelope as an array [ts, events, rank?] or a
// map; each event as an array ["BlockStored", fields in declaration
// order...] (vLLM <= 0.23, trailing defaults omitted) or a map {"type": ...}
// (>= 0.24, defaults omitted, any key order); block hashes as unsigned or
// signed integers or as bytes; replay replies with or without the topic
// frame. Unknown fields are skipped, events of unknown types counted and
// skipped. Anything else — truncated or trailing bytes, a known field of the
// wrong type, more than the limits — is an error for the whole batch (the
// subscriber then treats the engine as cold): the decoder never trusts a
// declared length, never recurses on the input's nesting and never throws.
#ifndef NARWHAL_ROUTER_FLEET_KV_EVENT_DECODE_H_
#define NARWHAL_ROUTER_FLEET_KV_EVENT_DECODE_H_

#include <absl/status/statusor.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace narwhal::router::kv {

// An engine's block hash: an opaque id, compared as bytes. An integer is
// kept as its 8-byte big-endian two's-complement form, bytes as they are.
struct EngineBlockHash {
  std::string bytes;
  friend bool operator==(const EngineBlockHash&, const EngineBlockHash&) = default;
};

struct BlockStored {
  std::vector<EngineBlockHash> block_hashes;
  // The block before the first stored one; unset when the chain starts.
  std::optional<EngineBlockHash> parent;
  // The stored blocks' tokens, block after block.
  std::vector<uint32_t> token_ids;
  uint32_t block_size = 0;
  std::string medium;     // "" when absent or nil ("GPU", "CPU", ...)
  std::string lora_name;  // "" when absent or nil
  int64_t group_idx = 0;  // the KV-cache group (hybrid models)
  // Some block carries extra keys (LoRA, cache salt, multimodal): its
  // content is more than its tokens.
  bool extra_keys = false;
};

struct BlockRemoved {
  std::vector<EngineBlockHash> block_hashes;
  std::string medium;
  int64_t group_idx = 0;
};

struct AllBlocksCleared {};

using KvEvent = std::variant<BlockStored, BlockRemoved, AllBlocksCleared>;

struct KvEventBatch {
  double ts = 0;  // the engine's time.time() when it published
  std::vector<KvEvent> events;
  std::optional<int64_t> data_parallel_rank;
  int unknown_events = 0;  // events of a type not listed above, skipped
};

struct KvDecodeLimits {
  size_t max_payload_bytes = 16u << 20;
  size_t max_events = 1u << 16;  // per batch
  size_t max_tokens = 1u << 20;  // per event
  size_t max_hashes = 1u << 16;  // per event
  size_t max_hash_bytes = 64;    // a bytes hash (sha256: 32)
};

absl::StatusOr<KvEventBatch> DecodeKvEventBatch(std::string_view payload,
                                                const KvDecodeLimits& limits = {});

// The sequence frame: 8 bytes, big-endian unsigned.
absl::StatusOr<uint64_t> DecodeSeq(std::string_view frame);
std::string EncodeSeq(uint64_t seq);

// The replay end marker's sequence (-1 as signed 8 bytes).
inline constexpr uint64_t kReplayEndSeq = ~uint64_t{0};

// One replay reply as a DEALER receives it (the frames after the ROUTER's
// identity): ["", seq, payload] (before vLLM PR #45177) or
// ["", topic, seq, payload] (after it); the end marker has the sequence
// kReplayEndSeq and an empty payload.
struct ReplayReply {
  bool end = false;
  uint64_t seq = 0;
  std::string_view payload;  // into the frames
};
absl::StatusOr<ReplayReply> DecodeReplayReply(const std::vector<std::string_view>& frames);

// The frames a DEALER sends to ask for every batch from `start_seq` on:
// ["", seq].
std::vector<std::string> ReplayRequest(uint64_t start_seq);

}  // namespace narwhal::router::kv

#endif  // NARWHAL_ROUTER_FLEET_KV_EVENT_DECODE_H_
