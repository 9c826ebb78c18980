// The simulator's tokenizer: one token per 4 characters of text (the count
// EstimateTokens gives), its id a hash of those characters. The same text
// gives the same ids in every process, a prompt's ids begin with the ids of
// any prefix cut at a multiple of 4 characters, and a prefix-cache block of
// 4 x block_size characters holds exactly block_size tokens — what
// POST /tokenize answers and what the KV events carry agree. Ids are below
// kSimVocabulary; generated tokens have ids above it (engines/sim/text_gen.h).
#ifndef NARWHAL_ENGINES_SIM_SIM_TOKENIZER_H_
#define NARWHAL_ENGINES_SIM_SIM_TOKENIZER_H_

#include <cstdint>
#include <string_view>
#include <vector>

namespace narwhal::sim {

inline constexpr int kCharsPerToken = 4;
inline constexpr uint32_t kSimVocabulary = 151643;

std::vector<uint32_t> SimTokenize(std::string_view text);

}  // namespace narwhal::sim

#endif  // NARWHAL_ENGINES_SIM_SIM_TOKENIZER_H_
