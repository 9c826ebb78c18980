// router/prompt_tokens: what a request's prompt is tokenized as, and what a
// /tokenize answer must be before placement trusts it.
#include "router/prompt_tokens.h"

#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

namespace narwhal::router {
namespace {

using engines::Api;
using json = nlohmann::json;

TEST(TokenizeQueryTest, ACompletionIsAskedInTheCompletionForm) {
  const TokenizeQuery q = MakeTokenizeQuery(
      Api::kCompletions,
      {{"model", "m"}, {"prompt", "hello"}, {"max_tokens", 9}, {"add_special_tokens", false}});
  ASSERT_TRUE(q.body);
  EXPECT_EQ(*q.body, (json{{"model", "m"}, {"prompt", "hello"}, {"add_special_tokens", false}}));
  // A list of one prompt is that prompt.
  const TokenizeQuery one = MakeTokenizeQuery(Api::kCompletions, {{"prompt", {"only"}}});
  ASSERT_TRUE(one.body);
  EXPECT_EQ((*one.body)["prompt"], "only");
}

TEST(TokenizeQueryTest, TokenIdsAreTheirOwnAnswer) {
  const json nested = json::parse("[[5, 6, 7]]");
  for (const json& prompt : {json::parse("[5, 6, 7]"), nested, json{5, 6, 7}, json{5.0, 6, 7}}) {
    const TokenizeQuery q = MakeTokenizeQuery(Api::kCompletions, {{"prompt", prompt}});
    EXPECT_FALSE(q.body) << prompt;
    EXPECT_FALSE(q.direct.failure) << prompt;
    EXPECT_EQ(q.direct.ids, (std::vector<uint32_t>{5, 6, 7})) << prompt;
  }
}

TEST(TokenizeQueryTest, WhatNamesNoOnePromptIsUnsupported) {
  const uint64_t too_big = uint64_t{std::numeric_limits<uint32_t>::max()} + 1;
  for (const json& prompt : {json{"a", "b"}, json::parse("[[1], [2]]"), json{1, -2},
                             json{1, too_big}, json::array(), json{1, 1.5}, json{1, "2"}}) {
    const TokenizeQuery q = MakeTokenizeQuery(Api::kCompletions, {{"prompt", prompt}});
    EXPECT_FALSE(q.body) << prompt;
    ASSERT_TRUE(q.direct.failure) << prompt;
    EXPECT_EQ(*q.direct.failure, TokenizeFailure::kUnsupported) << prompt;
    EXPECT_TRUE(q.direct.ids.empty()) << prompt;
  }
}

TEST(TokenizeQueryTest, AChatKeepsWhatItsTemplateRendersAndNothingElse) {
  const json messages = {{{"role", "system"}, {"content", "be brief"}},
                         {{"role", "user"}, {"content", "hi"}}};
  const json body = {{"model", "m"},
                     {"messages", messages},
                     {"tools", json::array()},
                     {"chat_template", "{{ x }}"},
                     {"continue_final_message", false},
                     {"max_tokens", 5},
                     {"stream", true},
                     {"temperature", 0}};
  const TokenizeQuery q = MakeTokenizeQuery(Api::kChatCompletions, body);
  ASSERT_TRUE(q.body);
  EXPECT_EQ(*q.body, (json{{"model", "m"},
                           {"messages", messages},
                           {"tools", json::array()},
                           {"chat_template", "{{ x }}"},
                           {"continue_final_message", false}}));
}

TEST(TokenizeAnswerTest, ReadsTheIds) {
  std::vector<uint32_t> ids;
  std::string why;
  ASSERT_TRUE(ParseTokenizeAnswer(
      R"({"count": 3, "max_model_len": 8, "tokens": [0, 7, 4294967295], "token_strs": null})", 10,
      &ids, &why))
      << why;
  EXPECT_EQ(ids, (std::vector<uint32_t>{0, 7, 4294967295u}));
}

TEST(TokenizeAnswerTest, RefusesEverythingElseWithAReason) {
  const std::vector<std::string> bad = {
      "",
      "not json",
      "[1, 2]",
      R"({"count": 2})",
      R"({"tokens": "1 2"})",
      R"({"tokens": []})",
      R"({"tokens": [1, -1]})",
      R"({"tokens": [1, 4294967296]})",
      R"({"tokens": [1, 2.5]})",
      R"({"tokens": [1, "2"]})",
      R"({"tokens": [1, 2, 3, 4, 5]})",  // more than the bound of 4
      R"({"tokens": [1, 2)",
      std::string(100000, '[') + std::string(100000, ']'),
  };
  for (const std::string& body : bad) {
    std::vector<uint32_t> ids = {42};
    std::string why;
    EXPECT_FALSE(ParseTokenizeAnswer(body, 4, &ids, &why)) << body.substr(0, 40);
    EXPECT_FALSE(why.empty()) << body.substr(0, 40);
    EXPECT_TRUE(ids.empty()) << body.substr(0, 40);
  }
}

}  // namespace
}  // namespace narwhal::router
