// Deterministic output text of the simulated engine.
//
// Token i of a request is " " + kVocabulary[Fnv1a64(prompt + "#" + i) % size]
// where i is written in decimal, prompt is the request's prompt text (for
// chat, the concatenated message contents) and the hash runs over the UTF-8
// bytes. The same prompt yields the same text on every engine, so tests of
// other components can compute what a sim will answer.
#ifndef NARWHAL_ENGINES_SIM_TEXT_GEN_H_
#define NARWHAL_ENGINES_SIM_TEXT_GEN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace narwhal::sim {

// 64-bit FNV-1a over the bytes of `data`.
uint64_t Fnv1a64(absl::string_view data);

// Token `index` (0-based) of the output for `prompt`, with its leading space.
std::string GenerateToken(absl::string_view prompt, int index);

// The first `count` tokens for `prompt` (empty when count <= 0).
std::vector<std::string> GenerateTokens(absl::string_view prompt, int count);

// The first `count` tokens for `prompt`, concatenated.
std::string GenerateText(absl::string_view prompt, int count);

// The simulated token count of a text: ceil(bytes / 4), at least 1.
int EstimateTokens(absl::string_view text);

// The words tokens are drawn from.
const std::vector<std::string>& Vocabulary();

}  // namespace narwhal::sim

#endif  // NARWHAL_ENGINES_SIM_TEXT_GEN_H_
