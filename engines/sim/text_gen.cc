#include "engines/sim/text_gen.h"

#include "absl/strings/str_cat.h"

namespace narwhal::sim {
namespace {

constexpr uint64_t kFnvOffset = 14695981039346656037ULL;
constexpr uint64_t kFnvPrime = 1099511628211ULL;

uint64_t AbsorbId(uint64_t state, uint32_t id) {
  for (int shift = 0; shift < 32; shift += 8) {
    state ^= (id >> shift) & 0xffU;
    state *= kFnvPrime;
  }
  return state;
}

}  // namespace

uint64_t Fnv1a64(std::string_view data) {
  uint64_t hash = kFnvOffset;
  for (unsigned char byte : data) {
    hash ^= byte;
    hash *= kFnvPrime;
  }
  return hash;
}

uint64_t SplitMix64(uint64_t x) {
  uint64_t z = x + 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
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

bool IsGeneratedId(uint32_t id) {
  return id >= kGeneratedIdBase && id - kGeneratedIdBase < Vocabulary().size();
}

std::string TokenText(uint32_t id) {
  if (!IsGeneratedId(id)) return "";
  return absl::StrCat(" ", Vocabulary()[id - kGeneratedIdBase]);
}

std::string TokensText(const std::vector<uint32_t>& ids) {
  std::string text;
  for (uint32_t id : ids) text += TokenText(id);
  return text;
}

TokenSequence::TokenSequence(const std::vector<uint32_t>& prompt_ids) : state_(kFnvOffset) {
  for (uint32_t id : prompt_ids) Append(id);
}

void TokenSequence::Append(uint32_t id) { state_ = AbsorbId(state_, id); }

uint32_t TokenSequence::NextId() const {
  return kGeneratedIdBase + static_cast<uint32_t>(SplitMix64(state_) % Vocabulary().size());
}

uint32_t TokenSequence::Generate() {
  const uint32_t id = NextId();
  Append(id);
  return id;
}

std::vector<uint32_t> GenerateIds(const std::vector<uint32_t>& prompt_ids, int count) {
  std::vector<uint32_t> ids;
  if (count <= 0) return ids;
  ids.reserve(count);
  TokenSequence sequence(prompt_ids);
  for (int i = 0; i < count; ++i) ids.push_back(sequence.Generate());
  return ids;
}

std::string GenerateToken(std::string_view prompt_text, int index) {
  if (index < 0) return "";
  return TokenText(GenerateIds(SimTokenize(prompt_text), index + 1).back());
}

std::vector<std::string> GenerateTokens(std::string_view prompt_text, int count) {
  std::vector<std::string> tokens;
  for (uint32_t id : GenerateIds(SimTokenize(prompt_text), count)) {
    tokens.push_back(TokenText(id));
  }
  return tokens;
}

std::string GenerateText(std::string_view prompt_text, int count) {
  return TokensText(GenerateIds(SimTokenize(prompt_text), count));
}

int EstimateTokens(std::string_view text) {
  const size_t tokens = (text.size() + 3) / 4;
  return tokens == 0 ? 1 : static_cast<int>(tokens);
}

}  // namespace narwhal::sim
