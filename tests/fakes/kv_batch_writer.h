// Writes KV-event batches the way vLLM's msgspec does (for the decoder's,
// the index's and the subscriber's tests): MpWriter is a msgpack writer over
// msgpuck's encoders; EncodeBatch() writes a whole KVEventBatch with events
// as arrays (vLLM <= 0.23) or maps (>= 0.24). Header-only; link
// msgpuck::msgpuck.
#ifndef NARWHAL_TESTS_FAKES_KV_BATCH_WRITER_H_
#define NARWHAL_TESTS_FAKES_KV_BATCH_WRITER_H_

#include <msgpuck.h>

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace narwhal::testing {

class MpWriter {
 public:
  MpWriter& Array(uint32_t n) { return Put(mp_encode_array(buf_, n)); }
  MpWriter& Map(uint32_t n) { return Put(mp_encode_map(buf_, n)); }
  MpWriter& Uint(uint64_t v) { return Put(mp_encode_uint(buf_, v)); }
  MpWriter& Int(int64_t v) {
    return v >= 0 ? Uint(static_cast<uint64_t>(v)) : Put(mp_encode_int(buf_, v));
  }
  MpWriter& Double(double v) { return Put(mp_encode_double(buf_, v)); }
  MpWriter& Nil() { return Put(mp_encode_nil(buf_)); }
  MpWriter& Str(const std::string& s) {
    out_ += std::string(buf_, mp_encode_strl(buf_, static_cast<uint32_t>(s.size())));
    out_ += s;
    return *this;
  }
  MpWriter& Bin(const std::string& s) {
    out_ += std::string(buf_, mp_encode_binl(buf_, static_cast<uint32_t>(s.size())));
    out_ += s;
    return *this;
  }
  MpWriter& Raw(const std::string& bytes) {
    out_ += bytes;
    return *this;
  }
  MpWriter& Tokens(const std::vector<uint32_t>& t) {
    Array(static_cast<uint32_t>(t.size()));
    for (uint32_t v : t) Uint(v);
    return *this;
  }
  const std::string& str() const { return out_; }

 private:
  MpWriter& Put(char* end) {
    out_.append(buf_, end);
    return *this;
  }
  char buf_[16];
  std::string out_;
};

// Events to write, with integer hashes.
struct StoredSpec {
  std::vector<uint64_t> hashes;
  std::optional<uint64_t> parent;
  std::vector<uint32_t> tokens;
  uint32_t block_size = 4;
  std::string medium = "GPU";
};
struct RemovedSpec {
  std::vector<uint64_t> hashes;
  std::string medium = "GPU";
};
struct ClearedSpec {};
using EventSpec = std::variant<StoredSpec, RemovedSpec, ClearedSpec>;
enum class EventForm { kArray, kMap };

inline std::string EncodeBatch(const std::vector<EventSpec>& events,
                               EventForm form = EventForm::kMap, double ts = 1.7e9) {
  MpWriter m;
  m.Array(3).Double(ts).Array(static_cast<uint32_t>(events.size()));
  for (const EventSpec& event : events) {
    if (const auto* s = std::get_if<StoredSpec>(&event)) {
      if (form == EventForm::kArray) {
        m.Array(8).Str("BlockStored");
      } else {
        m.Map(8).Str("type").Str("BlockStored").Str("block_hashes");
      }
      m.Array(static_cast<uint32_t>(s->hashes.size()));
      for (uint64_t h : s->hashes) m.Uint(h);
      if (form == EventForm::kMap) m.Str("parent_block_hash");
      if (s->parent) {
        m.Uint(*s->parent);
      } else {
        m.Nil();
      }
      if (form == EventForm::kMap) m.Str("token_ids");
      m.Tokens(s->tokens);
      if (form == EventForm::kMap) m.Str("block_size");
      m.Uint(s->block_size);
      if (form == EventForm::kMap) m.Str("lora_id");
      m.Nil();
      if (form == EventForm::kMap) m.Str("medium");
      m.Str(s->medium);
      if (form == EventForm::kMap) m.Str("lora_name");
      m.Nil();
    } else if (const auto* r = std::get_if<RemovedSpec>(&event)) {
      if (form == EventForm::kArray) {
        m.Array(3).Str("BlockRemoved");
      } else {
        m.Map(3).Str("type").Str("BlockRemoved").Str("block_hashes");
      }
      m.Array(static_cast<uint32_t>(r->hashes.size()));
      for (uint64_t h : r->hashes) m.Uint(h);
      if (form == EventForm::kMap) m.Str("medium");
      m.Str(r->medium);
    } else if (form == EventForm::kArray) {
      m.Array(1).Str("AllBlocksCleared");
    } else {
      m.Map(1).Str("type").Str("AllBlocksCleared");
    }
  }
  m.Uint(0);
  return m.str();
}

}  // namespace narwhal::testing

#endif  // NARWHAL_TESTS_FAKES_KV_BATCH_WRITER_H_
