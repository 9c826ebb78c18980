#include "router/prefix_index.h"

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
  size_t n = 0;
  while (n < key.chunks.size() && map_.count(key.chunks[n]) != 0) ++n;
  return n;
}

void PrefixIndex::Touch(uint64_t hash) {
  auto it = map_.find(hash);
  if (it != map_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second);
    return;
  }
  lru_.push_front(hash);
  map_.emplace(hash, lru_.begin());
}

void PrefixIndex::Insert(const PromptKey& key) {
  if (capacity_ == 0) return;
  // Last chunk first, so the prompt's first chunks end up most recent: when
  // the index is full, a prefix loses its tail before its head.
  for (auto it = key.chunks.rbegin(); it != key.chunks.rend(); ++it) Touch(*it);
  while (map_.size() > capacity_) {
    map_.erase(lru_.back());
    lru_.pop_back();
  }
}

void PrefixIndex::Clear() {
  lru_.clear();
  map_.clear();
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
