// Deterministic, autoregressive output of the simulated engine.
//
// Token model. A request's prompt is a sequence of token ids: a text prompt
// (a completions `prompt` string or one-element string list; for chat the
// concatenated message contents) is SimTokenize(text)
// (engines/sim/sim_tokenizer.h), a token-id prompt is its ids as given.
// Generated token j is the id g_j = kGeneratedIdBase + w_j, where w_j
// indexes Vocabulary() (64 words) and the token's text is
// " " + Vocabulary()[w_j]; kGeneratedIdBase is kSimVocabulary, so generated
// ids (151643..151706) never collide with the tokenizer's, and such an id in
// a prompt is a generated word.
//
// w_j is a function of the whole sequence before it: a running 64-bit state
// starts at the FNV-1a offset basis and absorbs, FNV-1a style, the 4
// little-endian bytes of every prompt id and then of g_0 .. g_{j-1};
// w_j = SplitMix64(state) % 64, where SplitMix64(x) is splitmix64's output
// for x: z = x + 0x9e3779b97f4a7c15; z = (z ^ (z >> 30)) *
// 0xbf58476d1ce4e5b9; z = (z ^ (z >> 27)) * 0x94d049bb133111eb;
// z ^ (z >> 31). Hence a generation is a continuation: the prompt
// P + g_0 .. g_{k-1} generates g_k, g_{k+1}, ... — exactly what the prompt
// P would have generated after its first k tokens. The same prompt yields
// the same tokens on every engine, so tests of other components can compute
// what a sim will answer.
#ifndef NARWHAL_ENGINES_SIM_TEXT_GEN_H_
#define NARWHAL_ENGINES_SIM_TEXT_GEN_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engines/sim/sim_tokenizer.h"

namespace narwhal::sim {

// The first generated id; generated ids are kGeneratedIdBase + word index.
inline constexpr uint32_t kGeneratedIdBase = kSimVocabulary;

// 64-bit FNV-1a over the bytes of `data`.
uint64_t Fnv1a64(std::string_view data);

// splitmix64's output function for `x` (see the header comment).
uint64_t SplitMix64(uint64_t x);

// The words generated tokens are drawn from (64).
const std::vector<std::string>& Vocabulary();

// Whether `id` is a generated word's id.
bool IsGeneratedId(uint32_t id);

// The text of a generated id (" " + its word); "" for any other id (the
// simulator's tokenizer is a hash: it cannot detokenize).
std::string TokenText(uint32_t id);

// The concatenated texts of `ids`.
std::string TokensText(const std::vector<uint32_t>& ids);

// The running state of a sequence: the ids absorbed so far decide the next
// generated id.
class TokenSequence {
 public:
  explicit TokenSequence(const std::vector<uint32_t>& prompt_ids);
  void Append(uint32_t id);
  // The id generated after the ids so far.
  uint32_t NextId() const;
  // NextId(), appended.
  uint32_t Generate();

 private:
  uint64_t state_;
};

// The first `count` generated ids after `prompt_ids` (empty when
// count <= 0).
std::vector<uint32_t> GenerateIds(const std::vector<uint32_t>& prompt_ids, int count);

// Convenience for a text prompt: the generation for SimTokenize(prompt_text).
// Token `index` (0-based), with its leading space.
std::string GenerateToken(std::string_view prompt_text, int index);
// The first `count` tokens' texts (empty when count <= 0).
std::vector<std::string> GenerateTokens(std::string_view prompt_text, int count);
// The first `count` tokens, concatenated.
std::string GenerateText(std::string_view prompt_text, int count);

// The simulated token count of a text: ceil(bytes / 4), at least 1 (the size
// of SimTokenize(text) for non-empty text).
int EstimateTokens(std::string_view text);

}  // namespace narwhal::sim

#endif  // NARWHAL_ENGINES_SIM_TEXT_GEN_H_
