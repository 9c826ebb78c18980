// Assembler bounds: an engine cannot grow the assembled state by inventing
// choice or tool-call indexes, and no input makes Add() throw.
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engines/stream_event.h"
#include "router/assembler.h"

namespace narwhal::router {
namespace {

using engines::Api;
using engines::kMaxChoices;
using json = nlohmann::json;
using ::testing::HasSubstr;

std::string ChoicesChunk(json choices) { return json{{"id", "x"}, {"choices", std::move(choices)}}.dump(); }

std::string TextAt(const json& index) {
  return ChoicesChunk(json::array({{{"index", index}, {"text", "a"}}}));
}

std::string ToolCall(const json& index) {
  return ChoicesChunk(json::array({{{"index", 0},
                             {"delta",
                              {{"tool_calls",
                                json::array({{{"index", index},
                                              {"function", {{"arguments", "{}"}}}}})}}}}}));
}

TEST(AssemblerBoundsTest, ChoiceIndexesWithinTheBoundAssemble) {
  Assembler a(Api::kCompletions);
  for (int i = 0; i < kMaxChoices; ++i) ASSERT_TRUE(a.Add(TextAt(i))) << a.error();
  EXPECT_EQ(a.Build()["choices"].size(), static_cast<size_t>(kMaxChoices));
}

TEST(AssemblerBoundsTest, ChoiceIndexPastTheBoundIsRefused) {
  Assembler a(Api::kCompletions);
  ASSERT_TRUE(a.Add(TextAt(0)));
  EXPECT_FALSE(a.Add(TextAt(100000)));
  EXPECT_EQ(a.error(), "decode chunk has choice index 100000; choice indexes must be in 0..15");
  EXPECT_FALSE(a.Add(TextAt(1)));  // later calls are ignored
}

TEST(AssemblerBoundsTest, NegativeAndHugeIndexesAreRefused) {
  for (const json& index : {json(-1), json(16), json(18446744073709551615ULL),
                            json(-9223372036854775807LL - 1)}) {
    Assembler a(Api::kChatCompletions);
    EXPECT_FALSE(a.Add(TextAt(index))) << index;
    EXPECT_THAT(a.error(), HasSubstr("choice index " + index.dump())) << index;
  }
}

TEST(AssemblerBoundsTest, TooManyChoicesInOneChunkAreRefused) {
  json choices = json::array();
  for (int i = 0; i <= kMaxChoices; ++i) choices.push_back({{"text", "a"}});
  Assembler a(Api::kCompletions);
  EXPECT_FALSE(a.Add(ChoicesChunk(choices)));
  EXPECT_EQ(a.error(), "decode chunk carries 17 choices; at most 16 are accepted");
}

TEST(AssemblerBoundsTest, HundredThousandIndexesDoNotGrowTheState) {
  // The first index past the bound ends assembly: nothing after it is kept.
  Assembler a(Api::kCompletions);
  int accepted = 0;
  for (int i = 0; i < 100000 && a.Add(TextAt(i)); ++i) ++accepted;
  EXPECT_EQ(accepted, kMaxChoices);
  EXPECT_EQ(a.Build()["choices"].size(), static_cast<size_t>(kMaxChoices));
}

TEST(AssemblerBoundsTest, ToolCallIndexesAreBounded) {
  Assembler a(Api::kChatCompletions);
  for (long long i = 0; i < Assembler::kMaxToolCalls; ++i) {
    ASSERT_TRUE(a.Add(ToolCall(i))) << a.error();
  }
  EXPECT_FALSE(a.Add(ToolCall(Assembler::kMaxToolCalls)));
  EXPECT_EQ(a.error(), "decode chunk has tool call index 128; tool call indexes must be in 0..127");
  Assembler negative(Api::kChatCompletions);
  EXPECT_FALSE(negative.Add(ToolCall(-3)));
  EXPECT_THAT(negative.error(), HasSubstr("tool call index -3"));
}

TEST(AssemblerBoundsTest, OddlyTypedFieldsNeverThrow) {
  // Before the bounds these threw out of Add (a non-number tool call index)
  // and the exception text reached the client.
  Assembler a(Api::kChatCompletions);
  EXPECT_NO_THROW({
    EXPECT_TRUE(a.Add(ToolCall("seven")));
    EXPECT_TRUE(a.Add(ToolCall(nullptr)));
    EXPECT_TRUE(a.Add(ToolCall(1.5)));
    EXPECT_TRUE(a.Add(TextAt("3")));
    EXPECT_TRUE(a.Add(ChoicesChunk(json::array(
        {{{"index", 0},
          {"delta",
           {{"tool_calls",
             json::array({{{"index", 0},
                           {"id", 5},
                           {"function", {{"name", 7}, {"arguments", json::array()}}}}})}}}}}))));
  });
  EXPECT_EQ(a.error(), "");
  EXPECT_NO_THROW((void)a.Build().dump());
}

}  // namespace
}  // namespace narwhal::router
