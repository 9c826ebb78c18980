#include "engines/sim/text_gen.h"

#include <set>
#include <string>

#include "gtest/gtest.h"

namespace narwhal::sim {
namespace {

TEST(SimTextGenTest, Fnv1a64MatchesReferenceVectors) {
  EXPECT_EQ(Fnv1a64(""), 0xcbf29ce484222325ULL);
  EXPECT_EQ(Fnv1a64("a"), 0xaf63dc4c8601ec8cULL);
  EXPECT_EQ(Fnv1a64("foobar"), 0x85944171f73967e8ULL);
}

TEST(SimTextGenTest, SamePromptSameText) {
  EXPECT_EQ(GenerateText("Capital of France?", 16),
            GenerateText("Capital of France?", 16));
  EXPECT_EQ(GenerateTokens("abc", 5), GenerateTokens("abc", 5));
}

TEST(SimTextGenTest, TextIsTheConcatenationOfTokens) {
  std::string joined;
  for (const std::string& token : GenerateTokens("hello", 7)) joined += token;
  EXPECT_EQ(joined, GenerateText("hello", 7));
  EXPECT_EQ(GenerateToken("hello", 3), GenerateTokens("hello", 7)[3]);
}

TEST(SimTextGenTest, TokensAreSpacePrefixedVocabularyWords) {
  const std::set<std::string> words(Vocabulary().begin(), Vocabulary().end());
  EXPECT_EQ(words.size(), Vocabulary().size()) << "duplicate words";
  for (const std::string& token : GenerateTokens("prompt", 50)) {
    ASSERT_FALSE(token.empty());
    EXPECT_EQ(token[0], ' ');
    EXPECT_EQ(words.count(token.substr(1)), 1u) << token;
  }
}

TEST(SimTextGenTest, FollowsTheDocumentedFormula) {
  // Token i = " " + vocabulary[fnv1a64(prompt + "#" + i) % size].
  const auto& words = Vocabulary();
  EXPECT_EQ(GenerateToken("hi", 0), " " + words[Fnv1a64("hi#0") % words.size()]);
  EXPECT_EQ(GenerateToken("hi", 12),
            " " + words[Fnv1a64("hi#12") % words.size()]);
}

TEST(SimTextGenTest, PinnedOutput) {
  // Other suites (and the SDK test) rely on this exact output.
  EXPECT_EQ(GenerateText("hello", 4), " path bright white across");
}

TEST(SimTextGenTest, DifferentPromptsDiffer) {
  EXPECT_NE(GenerateText("first prompt", 16), GenerateText("second prompt", 16));
}

TEST(SimTextGenTest, NonPositiveCountsGiveNothing) {
  EXPECT_EQ(GenerateText("x", 0), "");
  EXPECT_TRUE(GenerateTokens("x", -3).empty());
}

TEST(SimTextGenTest, EstimateTokensIsCeilOfBytesOverFour) {
  EXPECT_EQ(EstimateTokens(""), 1);
  EXPECT_EQ(EstimateTokens("abc"), 1);
  EXPECT_EQ(EstimateTokens("abcd"), 1);
  EXPECT_EQ(EstimateTokens("abcde"), 2);
  EXPECT_EQ(EstimateTokens(std::string(4000, 'x')), 1000);
}

}  // namespace
}  // namespace narwhal::sim
