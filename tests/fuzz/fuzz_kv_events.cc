// The KV-event decoder (router/fleet/kv_event_decode.h) on any bytes: the
// whole input as one batch payload, and its first bytes as sequence and
// replay frames.
//
// Checked: nothing throws; an accepted batch keeps within the limits it was
// given (events, tokens and hashes per event, hash bytes); re-encoding an
// accepted batch in the other event form (array events as maps and back)
// decodes to the same events; a sequence frame round-trips through
// EncodeSeq; a replay reply is accepted exactly when its layout is one of
// the two vLLM layouts.
#include <msgpuck.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "router/fleet/kv_event_decode.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using narwhal::fuzz::Printable;
namespace kv = narwhal::router::kv;

// Small limits, so the fuzzer reaches them.
constexpr kv::KvDecodeLimits kLimits{.max_payload_bytes = 16384,
                                     .max_events = 64,
                                     .max_tokens = 256,
                                     .max_hashes = 32,
                                     .max_hash_bytes = 64};

class Writer {
 public:
  void Array(uint32_t n) { Put(mp_encode_array(buf_, n)); }
  void Map(uint32_t n) { Put(mp_encode_map(buf_, n)); }
  void Uint(uint64_t v) { Put(mp_encode_uint(buf_, v)); }
  void Int(int64_t v) { v >= 0 ? Uint(static_cast<uint64_t>(v)) : Put(mp_encode_int(buf_, v)); }
  void Double(double v) { Put(mp_encode_double(buf_, v)); }
  void Nil() { Put(mp_encode_nil(buf_)); }
  void Str(std::string_view s) {
    Put(mp_encode_strl(buf_, static_cast<uint32_t>(s.size())));
    out.append(s);
  }
  void Bin(std::string_view s) {
    Put(mp_encode_binl(buf_, static_cast<uint32_t>(s.size())));
    out.append(s);
  }
  void OptStr(const std::string& s) { s.empty() ? Nil() : Str(s); }
  void Hashes(const std::vector<kv::EngineBlockHash>& hashes) {
    Array(static_cast<uint32_t>(hashes.size()));
    for (const kv::EngineBlockHash& h : hashes) Bin(h.bytes);
  }
  std::string out;

 private:
  void Put(char* end) { out.append(buf_, end); }
  char buf_[16];
};

// The batch again, events as maps when `maps`, else as arrays (every field
// written, so nothing depends on defaults).
std::string Encode(const kv::KvEventBatch& b, bool maps) {
  Writer w;
  w.Array(3);
  w.Double(b.ts);
  w.Array(static_cast<uint32_t>(b.events.size()));
  for (const kv::KvEvent& e : b.events) {
    if (const auto* s = std::get_if<kv::BlockStored>(&e)) {
      // type, block_hashes, parent_block_hash, token_ids, block_size,
      // lora_id, medium, lora_name, extra_keys, group_idx
      const auto key = [&](std::string_view k) {
        if (maps) w.Str(k);
      };
      if (maps) {
        w.Map(10);
      } else {
        w.Array(10);
      }
      key("type");
      w.Str("BlockStored");
      key("block_hashes");
      w.Hashes(s->block_hashes);
      key("parent_block_hash");
      s->parent ? w.Bin(s->parent->bytes) : w.Nil();
      key("token_ids");
      w.Array(static_cast<uint32_t>(s->token_ids.size()));
      for (uint32_t t : s->token_ids) w.Uint(t);
      key("block_size");
      w.Uint(s->block_size);
      key("lora_id");
      w.Nil();
      key("medium");
      w.OptStr(s->medium);
      key("lora_name");
      w.OptStr(s->lora_name);
      key("extra_keys");
      if (s->extra_keys) {
        w.Array(1);
        w.Str("salt");
      } else {
        w.Nil();
      }
      key("group_idx");
      w.Int(s->group_idx);
    } else if (const auto* r = std::get_if<kv::BlockRemoved>(&e)) {
      if (maps) {
        w.Map(4);
        w.Str("type");
      } else {
        w.Array(4);
      }
      w.Str("BlockRemoved");
      if (maps) w.Str("block_hashes");
      w.Hashes(r->block_hashes);
      if (maps) w.Str("medium");
      w.OptStr(r->medium);
      if (maps) w.Str("group_idx");
      w.Int(r->group_idx);
    } else {
      if (maps) {
        w.Map(1);
        w.Str("type");
      } else {
        w.Array(1);
      }
      w.Str("AllBlocksCleared");
    }
  }
  if (b.data_parallel_rank) {
    w.Int(*b.data_parallel_rank);
  } else {
    w.Nil();
  }
  return w.out;
}

bool SameEvent(const kv::KvEvent& a, const kv::KvEvent& b) {
  if (a.index() != b.index()) return false;
  if (const auto* x = std::get_if<kv::BlockStored>(&a)) {
    const auto& y = std::get<kv::BlockStored>(b);
    return x->block_hashes == y.block_hashes && x->parent == y.parent &&
           x->token_ids == y.token_ids && x->block_size == y.block_size && x->medium == y.medium &&
           x->lora_name == y.lora_name && x->group_idx == y.group_idx &&
           x->extra_keys == y.extra_keys;
  }
  if (const auto* x = std::get_if<kv::BlockRemoved>(&a)) {
    const auto& y = std::get<kv::BlockRemoved>(b);
    return x->block_hashes == y.block_hashes && x->medium == y.medium &&
           x->group_idx == y.group_idx;
  }
  return true;
}

void CheckBatch(std::string_view payload) {
  absl::StatusOr<kv::KvEventBatch> b = kv::DecodeKvEventBatch(payload, kLimits);
  if (!b.ok()) {
    FUZZ_CHECK_MSG(!b.status().message().empty(), "a refusal without a reason");
    return;
  }
  FUZZ_CHECK_MSG(b->events.size() <= kLimits.max_events, Printable(payload));
  for (const kv::KvEvent& e : b->events) {
    const std::vector<kv::EngineBlockHash>* hashes = nullptr;
    if (const auto* s = std::get_if<kv::BlockStored>(&e)) {
      FUZZ_CHECK_MSG(s->token_ids.size() <= kLimits.max_tokens, Printable(payload));
      hashes = &s->block_hashes;
      if (s->parent) {
        FUZZ_CHECK_MSG(!s->parent->bytes.empty() && s->parent->bytes.size() <= 64,
                       Printable(payload));
      }
    } else if (const auto* r = std::get_if<kv::BlockRemoved>(&e)) {
      hashes = &r->block_hashes;
    }
    if (hashes == nullptr) continue;
    FUZZ_CHECK_MSG(hashes->size() <= kLimits.max_hashes, Printable(payload));
    for (const kv::EngineBlockHash& h : *hashes) {
      FUZZ_CHECK_MSG(!h.bytes.empty() && h.bytes.size() <= kLimits.max_hash_bytes,
                     Printable(payload));
    }
  }
  // The other event form (and the same again) decodes to the same batch.
  for (const bool maps : {true, false}) {
    const std::string again = Encode(*b, maps);
    kv::KvDecodeLimits roomy = kLimits;
    roomy.max_payload_bytes = again.size();
    absl::StatusOr<kv::KvEventBatch> c = kv::DecodeKvEventBatch(again, roomy);
    FUZZ_CHECK_MSG(c.ok(), std::string(c.status().message()) + " for " + Printable(payload));
    FUZZ_CHECK_MSG(c->events.size() == b->events.size() && c->unknown_events == 0,
                   Printable(payload));
    for (size_t i = 0; i < b->events.size(); ++i) {
      FUZZ_CHECK_MSG(SameEvent(b->events[i], c->events[i]),
                     "event " + std::to_string(i) + " of " + Printable(payload));
    }
    FUZZ_CHECK_MSG(c->data_parallel_rank == b->data_parallel_rank, Printable(payload));
    FUZZ_CHECK_MSG(std::memcmp(&c->ts, &b->ts, sizeof(double)) == 0, Printable(payload));
  }
}

void CheckFrames(std::string_view data) {
  if (data.size() >= 8) {
    const absl::StatusOr<uint64_t> seq = kv::DecodeSeq(data.substr(0, 8));
    FUZZ_CHECK_MSG(seq.ok() && kv::EncodeSeq(*seq) == data.substr(0, 8), Printable(data));
  }
  // Frames: the input cut at each '|'.
  std::vector<std::string_view> frames;
  size_t from = 0;
  for (size_t i = 0; i <= data.size() && frames.size() < 8; ++i) {
    if (i == data.size() || data[i] == '|') {
      frames.push_back(data.substr(from, i - from));
      from = i + 1;
    }
  }
  const absl::StatusOr<kv::ReplayReply> reply = kv::DecodeReplayReply(frames);
  const bool layout = (frames.size() == 3 || frames.size() == 4) && frames[0].empty() &&
                      frames[frames.size() - 2].size() == 8;
  if (!layout) {
    FUZZ_CHECK_MSG(!reply.ok(), Printable(data));
    return;
  }
  const bool end = frames[frames.size() - 2] == std::string(8, '\xff');
  FUZZ_CHECK_MSG(reply.ok() == (end == frames.back().empty()), Printable(data));
  if (reply.ok()) FUZZ_CHECK_MSG(reply->end == end && reply->payload == frames.back(), "");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  CheckBatch(input);
  CheckFrames(input);
  return 0;
}
