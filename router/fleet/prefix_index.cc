#include "router/fleet/prefix_index.h"

#include <absl/hash/hash.h>

#include <algorithm>

namespace narwhal::router {
namespace {

// Separators that do not occur in ordinary text: they keep "ab"+"c" and
// "a"+"bc" (or a role and its content) apart.
constexpr char kFieldSeparator = '\x1f';
constexpr char kMessageSeparator = '\x1e';

void AppendContent(const nlohmann::json& content, std::string* out) {
  if (content.is_string()) {
    *out += content.get_ref<const std::string&>();
  } else if (content.is_array()) {
    for (const nlohmann::json& part : content) {
      if (part.is_object()) {
        auto text = part.find("text");
        if (text != part.end() && text->is_string()) {
          *out += text->get_ref<const std::string&>();
          continue;
        }
      }
      *out += part.dump();  // images and other parts: their JSON
      *out += kFieldSeparator;
    }
  } else if (!content.is_null()) {
    *out += content.dump();
  }
}

}  // namespace

PromptKey PrefixIndex::Key(std::string_view text) {
  PromptKey key;
  key.text_bytes = text.size();
  const size_t chunks = std::min(text.size() / kChunkBytes, kMaxChunks);
  key.chunks.reserve(chunks);
  uint64_t chain = 0;
  for (size_t k = 0; k < chunks; ++k) {
    chain = absl::HashOf(chain, text.substr(k * kChunkBytes, kChunkBytes));
    key.chunks.push_back(chain);
  }
  return key;
}

size_t PrefixIndex::Match(const PromptKey& key) const {
  // The longest present prefix: chunks [0, lo) present, [hi, n) absent.
  size_t lo = 0;
  size_t hi = key.chunks.size();
  while (lo < hi) {
    const size_t mid = lo + (hi - lo) / 2;
    if (map_.contains(key.chunks[mid])) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

void PrefixIndex::Unlink(uint32_t s) {
  Slot& slot = slots_[s];
  if (slot.prev != kNone) slots_[slot.prev].next = slot.next;
  if (slot.next != kNone) slots_[slot.next].prev = slot.prev;
  if (head_ == s) head_ = slot.next;
  if (tail_ == s) tail_ = slot.prev;
  slot.prev = slot.next = kNone;
}

void PrefixIndex::PushFront(uint32_t s) {
  Slot& slot = slots_[s];
  slot.prev = kNone;
  slot.next = head_;
  if (head_ != kNone) slots_[head_].prev = s;
  head_ = s;
  if (tail_ == kNone) tail_ = s;
}

void PrefixIndex::Touch(uint64_t hash) {
  auto [it, inserted] = map_.try_emplace(hash, kNone);
  if (!inserted) {
    if (it->second != head_) {
      Unlink(it->second);
      PushFront(it->second);
    }
    return;
  }
  uint32_t s;
  if (slots_.size() < capacity_) {
    s = static_cast<uint32_t>(slots_.size());
    slots_.push_back(Slot{});
  } else {
    // Full: the least recently used entry's slot is reused.
    s = tail_;
    Unlink(s);
    map_.erase(slots_[s].hash);
    it = map_.find(hash);  // erase may move elements of a flat map
  }
  slots_[s].hash = hash;
  it->second = s;
  PushFront(s);
}

void PrefixIndex::Insert(const PromptKey& key) {
  if (capacity_ == 0) return;
  // Last chunk first, so the prompt's first chunks end up most recent: when
  // the index is full, a prefix loses its tail before its head.
  for (auto it = key.chunks.rbegin(); it != key.chunks.rend(); ++it) Touch(*it);
}

void PrefixIndex::Clear() {
  slots_.clear();
  map_.clear();
  head_ = tail_ = kNone;
}

std::string PromptText(engines::Api api, const nlohmann::json& body) {
  std::string text;
  if (!body.is_object()) return text;
  if (api == engines::Api::kChatCompletions) {
    auto messages = body.find("messages");
    if (messages == body.end() || !messages->is_array()) return text;
    for (const nlohmann::json& m : *messages) {
      if (!m.is_object()) continue;
      auto role = m.find("role");
      if (role != m.end() && role->is_string()) text += role->get_ref<const std::string&>();
      text += kFieldSeparator;
      auto content = m.find("content");
      if (content != m.end()) AppendContent(*content, &text);
      text += kMessageSeparator;
    }
    return text;
  }
  auto prompt = body.find("prompt");
  if (prompt == body.end()) return text;
  if (prompt->is_array() && prompt->size() == 1 && (*prompt)[0].is_string()) {
    return (*prompt)[0].get<std::string>();
  }
  if (prompt->is_string()) return prompt->get<std::string>();
  return prompt->dump();  // token ids: their JSON text
}

}  // namespace narwhal::router
