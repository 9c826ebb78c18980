#include "router/fleet/kv_event_decode.h"

#include <absl/status/status.h>
#include <absl/strings/str_cat.h>
#include <msgpuck.h>

#include <limits>
#include <utility>

namespace narwhal::router::kv {
namespace {

using absl::InvalidArgumentError;
using absl::Status;

// The bytes of a value's header, from its first byte: the type byte plus a
// number's bytes or a length's. (msgpuck's mp_check_* helpers assert on
// some inputs in builds with assertions, so the bounds are checked here and
// msgpuck only decodes what fits.)
size_t HeaderBytes(uint8_t c) {
  if (c <= 0x7f || c >= 0xe0) return 1;                    // fixint
  if ((c & 0xe0) == 0xa0 || (c & 0xe0) == 0x80) return 1;  // fixstr, fixmap, fixarray
  switch (c) {
    case 0xcc:
    case 0xd0:
    case 0xc4:
    case 0xd9:
      return 2;
    case 0xcd:
    case 0xd1:
    case 0xc5:
    case 0xda:
    case 0xdc:
    case 0xde:
      return 3;
    case 0xce:
    case 0xd2:
    case 0xca:
    case 0xc6:
    case 0xdb:
    case 0xdd:
    case 0xdf:
      return 5;
    case 0xcf:
    case 0xd3:
    case 0xcb:
      return 9;
    default:
      return 1;  // nil, booleans; extensions and 0xc1 are only skipped
  }
}

// A read position in one msgpack buffer. Every read checks the bytes it
// needs against the end first; a container's declared count is checked
// against the bytes left (an element takes at least one), so no count read
// from the input is trusted.
class Cursor {
 public:
  Cursor(const char* p, const char* end) : p_(p), end_(end) {}

  bool at_end() const { return p_ >= end_; }
  const char* position() const { return p_; }
  size_t left() const { return static_cast<size_t>(end_ - p_); }

  // The type of the next value; call only when !at_end().
  mp_type type() const { return mp_typeof(*p_); }
  bool NextIs(mp_type t) const { return !at_end() && type() == t; }
  bool HeaderFits() const { return HeaderBytes(static_cast<uint8_t>(*p_)) <= left(); }

  Status Truncated(std::string_view what) const {
    return InvalidArgumentError(absl::StrCat("truncated msgpack (", std::string(what), ")"));
  }

  Status Nil() {
    if (!NextIs(MP_NIL)) return InvalidArgumentError("expected nil");
    mp_decode_nil(&p_);
    return absl::OkStatus();
  }

  Status Uint(uint64_t* out) {
    if (!NextIs(MP_UINT)) return InvalidArgumentError("expected an unsigned integer");
    if (!HeaderFits()) return Truncated("uint");
    *out = mp_decode_uint(&p_);
    return absl::OkStatus();
  }

  // Any integer that fits int64.
  Status Int(int64_t* out) {
    if (NextIs(MP_INT)) {
      if (!HeaderFits()) return Truncated("int");
      *out = mp_decode_int(&p_);
      return absl::OkStatus();
    }
    uint64_t u = 0;
    if (Status s = Uint(&u); !s.ok()) return InvalidArgumentError("expected an integer");
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return InvalidArgumentError("integer out of range");
    }
    *out = static_cast<int64_t>(u);
    return absl::OkStatus();
  }

  // Float, double or an integer.
  Status Number(double* out) {
    if (NextIs(MP_DOUBLE)) {
      if (!HeaderFits()) return Truncated("double");
      *out = mp_decode_double(&p_);
      return absl::OkStatus();
    }
    if (NextIs(MP_FLOAT)) {
      if (!HeaderFits()) return Truncated("float");
      *out = mp_decode_float(&p_);
      return absl::OkStatus();
    }
    int64_t i = 0;
    if (Status s = Int(&i); !s.ok()) return InvalidArgumentError("expected a number");
    *out = static_cast<double>(i);
    return absl::OkStatus();
  }

  // A str or bin value's bytes (into the buffer).
  Status Bytes(std::string_view* out) {
    uint32_t len = 0;
    if (NextIs(MP_STR)) {
      if (!HeaderFits()) return Truncated("str");
      len = mp_decode_strl(&p_);
    } else if (NextIs(MP_BIN)) {
      if (!HeaderFits()) return Truncated("bin");
      len = mp_decode_binl(&p_);
    } else {
      return InvalidArgumentError("expected a string");
    }
    if (len > left()) return Truncated("string bytes");
    *out = std::string_view(p_, len);
    p_ += len;
    return absl::OkStatus();
  }

  Status Str(std::string_view* out) {
    if (!NextIs(MP_STR)) return InvalidArgumentError("expected a string");
    return Bytes(out);
  }

  // A string, or nil as "".
  Status OptionalStr(std::string* out) {
    if (NextIs(MP_NIL)) {
      out->clear();
      return Nil();
    }
    std::string_view s;
    if (Status st = Str(&s); !st.ok()) return st;
    out->assign(s);
    return absl::OkStatus();
  }

  Status Array(uint32_t* n) {
    if (!NextIs(MP_ARRAY)) return InvalidArgumentError("expected an array");
    if (!HeaderFits()) return Truncated("array header");
    *n = mp_decode_array(&p_);
    if (*n > left()) return Truncated("array elements");
    return absl::OkStatus();
  }

  Status Map(uint32_t* n) {
    if (!NextIs(MP_MAP)) return InvalidArgumentError("expected a map");
    if (!HeaderFits()) return Truncated("map header");
    *n = mp_decode_map(&p_);
    if (static_cast<uint64_t>(*n) * 2 > left()) return Truncated("map entries");
    return absl::OkStatus();
  }

  // Skips one value of any type and nesting, without recursion: containers
  // add their (checked) element counts to the values still to skip.
  Status Skip() {
    uint64_t pending = 1;
    while (pending > 0) {
      if (at_end()) return Truncated("value");
      --pending;
      uint32_t n = 0;
      switch (type()) {
        case MP_ARRAY:
          if (Status s = Array(&n); !s.ok()) return s;
          pending += n;
          break;
        case MP_MAP:
          if (Status s = Map(&n); !s.ok()) return s;
          pending += 2 * static_cast<uint64_t>(n);
          break;
        default: {
          // A scalar, string or extension: mp_check validates exactly one
          // value (no container, so no count of its own to trust).
          const char* q = p_;
          if (mp_check(&q, end_) != 0 || q > end_) return Truncated("value");
          p_ = q;
        }
      }
    }
    return absl::OkStatus();
  }

 private:
  const char* p_;
  const char* end_;
};

Status Field(std::string_view name, Status s) {
  if (s.ok()) return s;
  return InvalidArgumentError(absl::StrCat(std::string(name), ": ", s.message()));
}

Status Hash(Cursor& c, const KvDecodeLimits& limits, EngineBlockHash* out) {
  if (c.NextIs(MP_UINT) || c.NextIs(MP_INT)) {
    uint64_t v = 0;
    if (c.NextIs(MP_UINT)) {
      if (Status s = c.Uint(&v); !s.ok()) return s;
    } else {
      int64_t i = 0;
      if (Status s = c.Int(&i); !s.ok()) return s;
      v = static_cast<uint64_t>(i);  // two's complement, as the engine's bytes
    }
    out->bytes.resize(8);
    for (int k = 7; k >= 0; --k, v >>= 8) out->bytes[k] = static_cast<char>(v & 0xff);
    return absl::OkStatus();
  }
  std::string_view b;
  if (Status s = c.Bytes(&b); !s.ok()) return InvalidArgumentError("expected an integer or bytes");
  if (b.empty() || b.size() > limits.max_hash_bytes) {
    return InvalidArgumentError(absl::StrCat("a hash of ", b.size(), " bytes"));
  }
  out->bytes.assign(b);
  return absl::OkStatus();
}

Status Hashes(Cursor& c, const KvDecodeLimits& limits, std::vector<EngineBlockHash>* out) {
  uint32_t n = 0;
  if (Status s = c.Array(&n); !s.ok()) return s;
  if (n > limits.max_hashes) return InvalidArgumentError(absl::StrCat(n, " hashes"));
  out->resize(n);
  for (EngineBlockHash& h : *out) {
    if (Status s = Hash(c, limits, &h); !s.ok()) return s;
  }
  return absl::OkStatus();
}

Status OptionalHash(Cursor& c, const KvDecodeLimits& limits, std::optional<EngineBlockHash>* out) {
  if (c.NextIs(MP_NIL)) {
    out->reset();
    return c.Nil();
  }
  EngineBlockHash h;
  if (Status s = Hash(c, limits, &h); !s.ok()) return s;
  *out = std::move(h);
  return absl::OkStatus();
}

Status Tokens(Cursor& c, const KvDecodeLimits& limits, std::vector<uint32_t>* out) {
  uint32_t n = 0;
  if (Status s = c.Array(&n); !s.ok()) return s;
  if (n > limits.max_tokens) return InvalidArgumentError(absl::StrCat(n, " tokens"));
  out->resize(n);
  for (uint32_t& t : *out) {
    uint64_t v = 0;
    if (Status s = c.Uint(&v); !s.ok()) return InvalidArgumentError("a token id is not unsigned");
    if (v > std::numeric_limits<uint32_t>::max()) {
      return InvalidArgumentError("a token id is out of range");
    }
    t = static_cast<uint32_t>(v);
  }
  return absl::OkStatus();
}

Status BlockSize(Cursor& c, uint32_t* out) {
  uint64_t v = 0;
  if (Status s = c.Uint(&v); !s.ok()) return s;
  if (v > std::numeric_limits<uint32_t>::max()) return InvalidArgumentError("out of range");
  *out = static_cast<uint32_t>(v);
  return absl::OkStatus();
}

Status OptionalInt(Cursor& c, int64_t* out) {
  if (c.NextIs(MP_NIL)) {
    *out = 0;
    return c.Nil();
  }
  return c.Int(out);
}

// extra_keys: nil, or one entry per block, each nil or anything else (a
// LoRA name, a salt, multimodal ids: skipped, but the event is marked).
Status ExtraKeys(Cursor& c, bool* any) {
  *any = false;
  if (c.NextIs(MP_NIL)) return c.Nil();
  uint32_t n = 0;
  if (Status s = c.Array(&n); !s.ok()) return s;
  for (uint32_t i = 0; i < n; ++i) {
    if (c.NextIs(MP_NIL)) {
      if (Status s = c.Nil(); !s.ok()) return s;
      continue;
    }
    *any = true;
    if (Status s = c.Skip(); !s.ok()) return s;
  }
  return absl::OkStatus();
}

enum class Tag { kStored, kRemoved, kCleared, kUnknown };

Tag TagOf(std::string_view name) {
  if (name == "BlockStored") return Tag::kStored;
  if (name == "BlockRemoved") return Tag::kRemoved;
  if (name == "AllBlocksCleared") return Tag::kCleared;
  return Tag::kUnknown;
}

// The fields of an event, by their name (map form) or their position
// (array form: 1-based after the tag, in declaration order).
Status StoredField(Cursor& c, std::string_view name, const KvDecodeLimits& limits, BlockStored* e,
                   int* required_seen) {
  if (name == "block_hashes") {
    ++*required_seen;
    return Field(name, Hashes(c, limits, &e->block_hashes));
  }
  if (name == "parent_block_hash") return Field(name, OptionalHash(c, limits, &e->parent));
  if (name == "token_ids") {
    ++*required_seen;
    return Field(name, Tokens(c, limits, &e->token_ids));
  }
  if (name == "block_size") {
    ++*required_seen;
    return Field(name, BlockSize(c, &e->block_size));
  }
  if (name == "medium") return Field(name, c.OptionalStr(&e->medium));
  if (name == "lora_name") return Field(name, c.OptionalStr(&e->lora_name));
  if (name == "extra_keys") return Field(name, ExtraKeys(c, &e->extra_keys));
  if (name == "group_idx") return Field(name, OptionalInt(c, &e->group_idx));
  return c.Skip();  // lora_id, kv_cache_spec_*, locality, and what comes later
}

Status RemovedField(Cursor& c, std::string_view name, const KvDecodeLimits& limits, BlockRemoved* e,
                    int* required_seen) {
  if (name == "block_hashes") {
    ++*required_seen;
    return Field(name, Hashes(c, limits, &e->block_hashes));
  }
  if (name == "medium") return Field(name, c.OptionalStr(&e->medium));
  if (name == "group_idx") return Field(name, OptionalInt(c, &e->group_idx));
  return c.Skip();
}

constexpr std::string_view kStoredFields[] = {"block_hashes", "parent_block_hash", "token_ids",
                                              "block_size",   "lora_id",           "medium",
                                              "lora_name",    "extra_keys",        "group_idx"};
constexpr std::string_view kRemovedFields[] = {"block_hashes", "medium", "group_idx"};

// The event a type's fields made, once its required fields were all seen
// (`required` counts them; an unknown type makes none).
Status Built(Tag tag, int required, BlockStored&& stored, BlockRemoved&& removed,
             std::optional<KvEvent>* event) {
  switch (tag) {
    case Tag::kStored:
      if (required < 3) return InvalidArgumentError("BlockStored lacks its required fields");
      *event = std::move(stored);
      break;
    case Tag::kRemoved:
      if (required < 1) return InvalidArgumentError("BlockRemoved lacks block_hashes");
      *event = std::move(removed);
      break;
    case Tag::kCleared:
      *event = AllBlocksCleared{};
      break;
    case Tag::kUnknown:
      break;
  }
  return absl::OkStatus();
}

// A map key: a string, or "" for a key of any other type (skipped).
Status Key(Cursor& c, std::string_view* key) {
  *key = {};
  return c.NextIs(MP_STR) ? c.Str(key) : c.Skip();
}

// One event; an unknown type leaves *event unset.
Status Event(Cursor& c, const KvDecodeLimits& limits, std::optional<KvEvent>* event) {
  event->reset();
  if (c.NextIs(MP_ARRAY)) {  // vLLM <= 0.23: [tag, field1, field2, ...]
    uint32_t n = 0;
    if (Status s = c.Array(&n); !s.ok()) return s;
    if (n == 0) return InvalidArgumentError("an event array without its type");
    std::string_view name;
    if (Status s = c.Str(&name); !s.ok()) return Field("event type", s);
    const Tag tag = TagOf(name);
    int required = 0;
    BlockStored stored;
    BlockRemoved removed;
    for (uint32_t i = 1; i < n; ++i) {
      Status s;
      if (tag == Tag::kStored && i <= std::size(kStoredFields)) {
        s = StoredField(c, kStoredFields[i - 1], limits, &stored, &required);
      } else if (tag == Tag::kRemoved && i <= std::size(kRemovedFields)) {
        s = RemovedField(c, kRemovedFields[i - 1], limits, &removed, &required);
      } else {
        s = c.Skip();
      }
      if (!s.ok()) return s;
    }
    return Built(tag, required, std::move(stored), std::move(removed), event);
  }
  // vLLM >= 0.24: {"type": tag, field: value, ...} in any order. The type
  // first (one pass that only skips), then the fields.
  uint32_t n = 0;
  if (Status s = c.Map(&n); !s.ok())
    return InvalidArgumentError("an event is neither array nor map");
  const Cursor body = c;
  std::optional<Tag> tag;
  for (uint32_t i = 0; i < n; ++i) {
    std::string_view key;
    if (Status s = Key(c, &key); !s.ok()) return s;
    if (key == "type") {
      std::string_view name;
      if (Status s = c.Str(&name); !s.ok()) return Field("type", s);
      tag = TagOf(name);
    } else if (Status s = c.Skip(); !s.ok()) {
      return s;
    }
  }
  if (!tag) return InvalidArgumentError("an event map without \"type\"");
  const Cursor after = c;
  c = body;
  int required = 0;
  BlockStored stored;
  BlockRemoved removed;
  for (uint32_t i = 0; i < n; ++i) {
    std::string_view key;
    if (Status s = Key(c, &key); !s.ok()) return s;
    Status s;
    if (key == "type" || key.empty()) {
      s = c.Skip();
    } else if (*tag == Tag::kStored) {
      s = StoredField(c, key, limits, &stored, &required);
    } else if (*tag == Tag::kRemoved) {
      s = RemovedField(c, key, limits, &removed, &required);
    } else {
      s = c.Skip();
    }
    if (!s.ok()) return s;
  }
  c = after;
  return Built(*tag, required, std::move(stored), std::move(removed), event);
}

Status Events(Cursor& c, const KvDecodeLimits& limits, KvEventBatch* batch) {
  uint32_t n = 0;
  if (Status s = c.Array(&n); !s.ok()) return Field("events", s);
  if (n > limits.max_events) return InvalidArgumentError(absl::StrCat(n, " events in a batch"));
  batch->events.reserve(n);
  for (uint32_t i = 0; i < n; ++i) {
    std::optional<KvEvent> event;
    if (Status s = Event(c, limits, &event); !s.ok()) {
      return InvalidArgumentError(absl::StrCat("event ", i, ": ", s.message()));
    }
    if (event) {
      batch->events.push_back(std::move(*event));
    } else {
      ++batch->unknown_events;
    }
  }
  return absl::OkStatus();
}

Status Rank(Cursor& c, KvEventBatch* batch) {
  if (c.NextIs(MP_NIL)) {
    batch->data_parallel_rank.reset();
    return c.Nil();
  }
  int64_t rank = 0;
  if (Status s = c.Int(&rank); !s.ok()) return Field("data_parallel_rank", s);
  batch->data_parallel_rank = rank;
  return absl::OkStatus();
}

uint64_t BigEndian(std::string_view eight) {
  uint64_t v = 0;
  for (char ch : eight) v = (v << 8) | static_cast<uint8_t>(ch);
  return v;
}

}  // namespace

absl::StatusOr<KvEventBatch> DecodeKvEventBatch(std::string_view payload,
                                                const KvDecodeLimits& limits) {
  if (payload.size() > limits.max_payload_bytes) {
    return InvalidArgumentError(absl::StrCat("a batch of ", payload.size(), " bytes"));
  }
  if (payload.empty()) return InvalidArgumentError("an empty batch");
  Cursor c(payload.data(), payload.data() + payload.size());
  KvEventBatch batch;
  if (c.NextIs(MP_ARRAY)) {  // [ts, events, data_parallel_rank?, ...]
    uint32_t n = 0;
    if (Status s = c.Array(&n); !s.ok()) return s;
    if (n < 2) return InvalidArgumentError("a batch array without its events");
    if (Status s = c.Number(&batch.ts); !s.ok()) return Field("ts", s);
    if (Status s = Events(c, limits, &batch); !s.ok()) return s;
    if (n >= 3) {
      if (Status s = Rank(c, &batch); !s.ok()) return s;
    }
    for (uint32_t i = 3; i < n; ++i) {
      if (Status s = c.Skip(); !s.ok()) return s;
    }
  } else if (c.NextIs(MP_MAP)) {  // {"ts": ..., "events": [...], ...}
    uint32_t n = 0;
    if (Status s = c.Map(&n); !s.ok()) return s;
    bool events = false;
    for (uint32_t i = 0; i < n; ++i) {
      std::string_view key;
      if (Status s = Key(c, &key); !s.ok()) return s;
      Status s;
      if (key == "ts") {
        s = Field("ts", c.Number(&batch.ts));
      } else if (key == "events") {
        if (events) return InvalidArgumentError("events given twice");
        events = true;
        s = Events(c, limits, &batch);
      } else if (key == "data_parallel_rank") {
        s = Rank(c, &batch);
      } else {
        s = c.Skip();
      }
      if (!s.ok()) return s;
    }
    if (!events) return InvalidArgumentError("a batch map without \"events\"");
  } else {
    return InvalidArgumentError("a batch is neither array nor map");
  }
  if (!c.at_end()) {
    return InvalidArgumentError(absl::StrCat(c.left(), " bytes after the batch"));
  }
  return batch;
}

absl::StatusOr<uint64_t> DecodeSeq(std::string_view frame) {
  if (frame.size() != 8) {
    return InvalidArgumentError(absl::StrCat("a sequence frame of ", frame.size(), " bytes"));
  }
  return BigEndian(frame);
}

std::string EncodeSeq(uint64_t seq) {
  std::string out(8, '\0');
  for (int k = 7; k >= 0; --k, seq >>= 8) out[k] = static_cast<char>(seq & 0xff);
  return out;
}

absl::StatusOr<ReplayReply> DecodeReplayReply(const std::vector<std::string_view>& frames) {
  if (frames.size() != 3 && frames.size() != 4) {
    return InvalidArgumentError(
        absl::StrCat("a replay reply of ", frames.size(), " frames (3 or 4 expected)"));
  }
  if (!frames[0].empty()) return InvalidArgumentError("a replay reply without its empty frame");
  const std::string_view seq_frame = frames[frames.size() - 2];
  absl::StatusOr<uint64_t> seq = DecodeSeq(seq_frame);
  if (!seq.ok()) return seq.status();
  ReplayReply reply;
  reply.seq = *seq;
  reply.payload = frames.back();
  reply.end = *seq == kReplayEndSeq;
  if (reply.end && !reply.payload.empty()) {
    return InvalidArgumentError("a replay end marker with a payload");
  }
  if (!reply.end && reply.payload.empty()) {
    return InvalidArgumentError("a replayed batch without its payload");
  }
  return reply;
}

std::vector<std::string> ReplayRequest(uint64_t start_seq) { return {"", EncodeSeq(start_seq)}; }

}  // namespace narwhal::router::kv
