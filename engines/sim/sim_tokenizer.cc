#include "engines/sim/sim_tokenizer.h"

namespace narwhal::sim {

std::vector<uint32_t> SimTokenize(std::string_view text) {
  std::vector<uint32_t> ids;
  ids.reserve((text.size() + kCharsPerToken - 1) / kCharsPerToken);
  for (size_t at = 0; at < text.size(); at += kCharsPerToken) {
    uint64_t h = 14695981039346656037ULL;  // FNV-1a
    for (unsigned char c : text.substr(at, kCharsPerToken)) {
      h ^= c;
      h *= 1099511628211ULL;
    }
    ids.push_back(static_cast<uint32_t>(h % kSimVocabulary));
  }
  return ids;
}

}  // namespace narwhal::sim
