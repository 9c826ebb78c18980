#include "engines/sim/text_gen.h"

#include "absl/strings/str_cat.h"

namespace narwhal::sim {

uint64_t Fnv1a64(absl::string_view data) {
  uint64_t hash = 14695981039346656037ULL;
  for (unsigned char byte : data) {
    hash ^= byte;
    hash *= 1099511628211ULL;
  }
  return hash;
}

const std::vector<std::string>& Vocabulary() {
  static const auto* const kWords = new std::vector<std::string>{
      "the",    "river",  "stone",  "light",   "quiet",  "north",   "whale", "tide",
      "harbor", "signal", "cold",   "bright",  "deep",   "current", "shore", "wind",
      "salt",   "drift",  "silver", "moon",    "wave",   "reef",    "ice",   "song",
      "path",   "field",  "cloud",  "storm",   "island", "pod",     "blue",  "fjord",
      "echo",   "slow",   "swift",  "calm",    "open",   "far",     "near",  "under",
      "over",   "and",    "of",     "to",      "in",     "a",       "with",  "from",
      "into",   "across", "beyond", "distant", "old",    "new",     "long",  "small",
      "great",  "clear",  "dark",   "warm",    "green",  "gray",    "white", "red"};
  return *kWords;
}

std::string GenerateToken(absl::string_view prompt, int index) {
  const std::vector<std::string>& words = Vocabulary();
  const uint64_t hash = Fnv1a64(absl::StrCat(prompt, "#", index));
  return absl::StrCat(" ", words[hash % words.size()]);
}

std::vector<std::string> GenerateTokens(absl::string_view prompt, int count) {
  std::vector<std::string> tokens;
  if (count <= 0) return tokens;
  tokens.reserve(count);
  for (int i = 0; i < count; ++i) tokens.push_back(GenerateToken(prompt, i));
  return tokens;
}

std::string GenerateText(absl::string_view prompt, int count) {
  std::string text;
  for (int i = 0; i < count; ++i) text += GenerateToken(prompt, i);
  return text;
}

int EstimateTokens(absl::string_view text) {
  const size_t tokens = (text.size() + 3) / 4;
  return tokens == 0 ? 1 : static_cast<int>(tokens);
}

}  // namespace narwhal::sim
