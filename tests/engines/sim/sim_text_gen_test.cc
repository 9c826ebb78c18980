#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "engines/sim/sim_tokenizer.h"
#include "engines/sim/text_gen.h"
#include "gtest/gtest.h"

namespace narwhal::sim {
namespace {

// The documented formula, written out here on its own: the state absorbs
// each id's 4 little-endian bytes FNV-1a style; the next word is
// splitmix64(state) % 64 and its id kSimVocabulary + word.
uint64_t Absorb(uint64_t state, uint32_t id) {
  const unsigned char bytes[4] = {
      static_cast<unsigned char>(id), static_cast<unsigned char>(id >> 8),
      static_cast<unsigned char>(id >> 16), static_cast<unsigned char>(id >> 24)};
  for (unsigned char b : bytes) state = (state ^ b) * 0x100000001b3ULL;
  return state;
}

uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

std::vector<uint32_t> ReferenceIds(const std::vector<uint32_t>& prompt, int count) {
  uint64_t state = 0xcbf29ce484222325ULL;
  for (uint32_t id : prompt) state = Absorb(state, id);
  std::vector<uint32_t> out;
  for (int j = 0; j < count; ++j) {
    const uint32_t id = 151643 + static_cast<uint32_t>(Mix(state) % 64);
    out.push_back(id);
    state = Absorb(state, id);
  }
  return out;
}

TEST(SimTextGenTest, Fnv1a64MatchesReferenceVectors) {
  EXPECT_EQ(Fnv1a64(""), 0xcbf29ce484222325ULL);
  EXPECT_EQ(Fnv1a64("a"), 0xaf63dc4c8601ec8cULL);
  EXPECT_EQ(Fnv1a64("foobar"), 0x85944171f73967e8ULL);
}

TEST(SimTextGenTest, SplitMix64MatchesReferenceVectors) {
  // The first outputs of splitmix64 seeded with 0 (its state advanced by
  // the golden gamma before each output).
  EXPECT_EQ(SplitMix64(0), 0xe220a8397b1dcdafULL);
  EXPECT_EQ(SplitMix64(0x9e3779b97f4a7c15ULL), 0x6e789e6aa1b965f4ULL);
}

TEST(SimTextGenTest, FollowsTheDocumentedFormula) {
  EXPECT_EQ(kGeneratedIdBase, kSimVocabulary);
  for (const std::vector<uint32_t>& prompt :
       {std::vector<uint32_t>{}, std::vector<uint32_t>{1}, std::vector<uint32_t>{7, 8, 151650},
        SimTokenize("Capital of France?")}) {
    EXPECT_EQ(GenerateIds(prompt, 40), ReferenceIds(prompt, 40));
  }
  const std::vector<uint32_t> ids = ReferenceIds(SimTokenize("hi"), 13);
  const auto& words = Vocabulary();
  EXPECT_EQ(GenerateToken("hi", 0), " " + words[ids[0] - 151643]);
  EXPECT_EQ(GenerateToken("hi", 12), " " + words[ids[12] - 151643]);
}

TEST(SimTextGenTest, PinnedOutput) {
  // Other suites (the SDK test, the KV placement benchmark) port the
  // generator and rely on this exact output.
  EXPECT_EQ(SimTokenize("hello"), (std::vector<uint32_t>{18210, 149946}));
  EXPECT_EQ(GenerateIds(SimTokenize("hello"), 4),
            (std::vector<uint32_t>{151688, 151693, 151657, 151662}));
  EXPECT_EQ(GenerateText("hello", 4), " a beyond shore moon");
}

TEST(SimTextGenTest, GenerationContinuesItsOwnOutput) {
  const std::vector<uint32_t> prompt = SimTokenize("Tell me about narwhals.");
  const std::vector<uint32_t> whole = GenerateIds(prompt, 20);
  for (int k = 0; k <= 20; ++k) {
    std::vector<uint32_t> continued = prompt;
    continued.insert(continued.end(), whole.begin(), whole.begin() + k);
    const std::vector<uint32_t> rest = GenerateIds(continued, 20 - k);
    EXPECT_EQ(rest, std::vector<uint32_t>(whole.begin() + k, whole.end())) << "k=" << k;
  }
  TokenSequence sequence(prompt);
  EXPECT_EQ(sequence.NextId(), whole[0]);
  EXPECT_EQ(sequence.Generate(), whole[0]);
  sequence.Append(whole[1]);
  EXPECT_EQ(sequence.Generate(), whole[2]);
}

TEST(SimTextGenTest, SamePromptSameText) {
  EXPECT_EQ(GenerateText("Capital of France?", 16), GenerateText("Capital of France?", 16));
  EXPECT_EQ(GenerateTokens("abc", 5), GenerateTokens("abc", 5));
}

TEST(SimTextGenTest, TextIsTheConcatenationOfTokens) {
  std::string joined;
  for (const std::string& token : GenerateTokens("hello", 7)) joined += token;
  EXPECT_EQ(joined, GenerateText("hello", 7));
  EXPECT_EQ(GenerateToken("hello", 3), GenerateTokens("hello", 7)[3]);
  EXPECT_EQ(TokensText(GenerateIds(SimTokenize("hello"), 7)), GenerateText("hello", 7));
}

TEST(SimTextGenTest, TokensAreSpacePrefixedVocabularyWords) {
  ASSERT_EQ(Vocabulary().size(), 64u);
  const std::set<std::string> words(Vocabulary().begin(), Vocabulary().end());
  EXPECT_EQ(words.size(), Vocabulary().size()) << "duplicate words";
  for (const std::string& token : GenerateTokens("prompt", 50)) {
    ASSERT_FALSE(token.empty());
    EXPECT_EQ(token[0], ' ');
    EXPECT_EQ(words.count(token.substr(1)), 1u) << token;
  }
}

TEST(SimTextGenTest, GeneratedIdsAreTheirOwnRange) {
  EXPECT_FALSE(IsGeneratedId(0));
  EXPECT_FALSE(IsGeneratedId(kSimVocabulary - 1));
  EXPECT_TRUE(IsGeneratedId(kSimVocabulary));
  EXPECT_TRUE(IsGeneratedId(kSimVocabulary + 63));
  EXPECT_FALSE(IsGeneratedId(kSimVocabulary + 64));
  EXPECT_EQ(TokenText(kSimVocabulary), " the");
  EXPECT_EQ(TokenText(kSimVocabulary + 63), " red");
  EXPECT_EQ(TokenText(12), "");
  for (uint32_t id : GenerateIds(SimTokenize("range"), 200)) EXPECT_TRUE(IsGeneratedId(id)) << id;
}

TEST(SimTextGenTest, OutputIsWellSpread) {
  // Over many prompts every word turns up, and no word dominates.
  std::vector<int> counts(64, 0);
  for (int p = 0; p < 2000; ++p) {
    for (uint32_t id : GenerateIds({static_cast<uint32_t>(p)}, 8)) ++counts[id - kGeneratedIdBase];
  }
  for (int c : counts) {
    EXPECT_GT(c, 150);
    EXPECT_LT(c, 350);
  }
}

TEST(SimTextGenTest, DifferentPromptsDiffer) {
  EXPECT_NE(GenerateText("first prompt", 16), GenerateText("second prompt", 16));
}

TEST(SimTextGenTest, NonPositiveCountsGiveNothing) {
  EXPECT_EQ(GenerateText("x", 0), "");
  EXPECT_TRUE(GenerateTokens("x", -3).empty());
  EXPECT_TRUE(GenerateIds({1, 2}, 0).empty());
}

TEST(SimTextGenTest, EstimateTokensIsCeilOfBytesOverFour) {
  EXPECT_EQ(EstimateTokens(""), 1);
  EXPECT_EQ(EstimateTokens("abc"), 1);
  EXPECT_EQ(EstimateTokens("abcd"), 1);
  EXPECT_EQ(EstimateTokens("abcde"), 2);
  EXPECT_EQ(EstimateTokens(std::string(4000, 'x')), 1000);
  EXPECT_EQ(static_cast<size_t>(EstimateTokens("narwhals live in the arctic")),
            SimTokenize("narwhals live in the arctic").size());
}

}  // namespace
}  // namespace narwhal::sim
