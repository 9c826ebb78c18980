// Assembler: folding a decode stream into one non-streaming response.
#include "router/assembler.h"

#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace narwhal::router {
namespace {

using engines::Api;
using json = nlohmann::json;

json Choice(json fields) {
  fields["index"] = fields.value("index", 0);
  return fields;
}
std::string Chunk(json choices, json extra = json::object()) {
  json c = {{"id", "x-1"}, {"created", 7}, {"model", "m"}, {"choices", std::move(choices)}};
  for (auto it = extra.begin(); it != extra.end(); ++it) c[it.key()] = *it;
  return c.dump();
}
std::string Delta(json delta, json finish = nullptr, int index = 0) {
  return Chunk(json::array(
      {{{"index", index}, {"delta", std::move(delta)}, {"finish_reason", std::move(finish)}}}));
}

TEST(AssemblerTest, CompletionsTextConcatenatedWithLastFinishReason) {
  Assembler a(Api::kCompletions);
  ASSERT_TRUE(a.Add(Chunk(json::array({Choice({{"text", "Hel"}, {"finish_reason", nullptr}})}))));
  ASSERT_TRUE(a.Add(Chunk(json::array({Choice({{"text", "lo"}, {"finish_reason", "length"}})}),
                          {{"system_fingerprint", "fp"}})));
  ASSERT_TRUE(a.Add(Chunk(json::array(), {{"usage", {{"prompt_tokens", 3},
                                                     {"completion_tokens", 2},
                                                     {"total_tokens", 5}}}})));
  const json out = a.Build();
  EXPECT_EQ(out["object"], "text_completion");
  EXPECT_EQ(out["id"], "x-1");
  EXPECT_EQ(out["created"], 7);
  EXPECT_EQ(out["model"], "m");
  ASSERT_EQ(out["choices"].size(), 1u);
  EXPECT_EQ(out["choices"][0]["text"], "Hello");
  EXPECT_EQ(out["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(out["usage"]["completion_tokens"], 2);
  EXPECT_EQ(out["system_fingerprint"], "fp");
  EXPECT_TRUE(a.error().empty());
}

TEST(AssemblerTest, ChatContentReasoningRefusalAndStopReason) {
  Assembler a(Api::kChatCompletions);
  ASSERT_TRUE(a.Add(Delta({{"role", "assistant"}, {"content", ""}})));
  ASSERT_TRUE(a.Add(Delta({{"reasoning_content", "think "}})));
  ASSERT_TRUE(a.Add(Delta({{"reasoning_content", "more"}})));
  ASSERT_TRUE(a.Add(Delta({{"content", "Hi"}})));
  ASSERT_TRUE(a.Add(Delta({{"content", " there"}})));
  ASSERT_TRUE(a.Add(Chunk(json::array({{{"index", 0},
                                        {"delta", json::object()},
                                        {"finish_reason", "stop"},
                                        {"stop_reason", 42}}}))));
  const json out = a.Build();
  EXPECT_EQ(out["object"], "chat.completion");
  const json& message = out["choices"][0]["message"];
  EXPECT_EQ(message["role"], "assistant");
  EXPECT_EQ(message["content"], "Hi there");
  EXPECT_EQ(message["reasoning_content"], "think more");
  EXPECT_FALSE(message.contains("refusal"));
  EXPECT_FALSE(message.contains("tool_calls"));
  EXPECT_EQ(out["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(out["choices"][0]["stop_reason"], 42);
}

TEST(AssemblerTest, RefusalIsKeptWhenPresent) {
  Assembler a(Api::kChatCompletions);
  ASSERT_TRUE(a.Add(Delta({{"refusal", "I can"}})));
  ASSERT_TRUE(a.Add(Delta({{"refusal", "not."}}, "stop")));
  EXPECT_EQ(a.Build()["choices"][0]["message"]["refusal"], "I cannot.");
}

TEST(AssemblerTest, ToolCallsMergedByIndex) {
  Assembler a(Api::kChatCompletions);
  ASSERT_TRUE(a.Add(Delta({{"tool_calls",
                            {{{"index", 0},
                              {"id", "call_a"},
                              {"type", "function"},
                              {"function", {{"name", "get"}, {"arguments", ""}}}}}}})));
  ASSERT_TRUE(a.Add(Delta({{"tool_calls", {{{"index", 0}, {"function", {{"arguments", "{\"x\""}}}}}}})));
  ASSERT_TRUE(a.Add(Delta({{"tool_calls",
                            {{{"index", 1},
                              {"id", "call_b"},
                              {"type", "function"},
                              {"function", {{"name", "put"}, {"arguments", "{}"}}}}}}})));
  ASSERT_TRUE(a.Add(Delta({{"tool_calls", {{{"index", 0}, {"function", {{"arguments", ":1}"}}}}}}},
                          "tool_calls")));
  const json out = a.Build();
  const json& calls = out["choices"][0]["message"]["tool_calls"];
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0]["index"], 0);
  EXPECT_EQ(calls[0]["id"], "call_a");
  EXPECT_EQ(calls[0]["type"], "function");
  EXPECT_EQ(calls[0]["function"]["name"], "get");
  EXPECT_EQ(calls[0]["function"]["arguments"], "{\"x\":1}");
  EXPECT_EQ(calls[1]["index"], 1);
  EXPECT_EQ(calls[1]["id"], "call_b");
  EXPECT_EQ(calls[1]["function"]["name"], "put");
  EXPECT_EQ(calls[1]["function"]["arguments"], "{}");
  EXPECT_EQ(out["choices"][0]["finish_reason"], "tool_calls");
}

TEST(AssemblerTest, CompletionsLogprobsConcatenated) {
  Assembler a(Api::kCompletions);
  ASSERT_TRUE(a.Add(Chunk(json::array({Choice(
      {{"text", "a"},
       {"logprobs", {{"tokens", {"a"}}, {"token_logprobs", {-0.5}}, {"text_offset", {0}}}}})}))));
  ASSERT_TRUE(a.Add(Chunk(json::array({Choice(
      {{"text", "b"},
       {"logprobs", {{"tokens", {"b"}}, {"token_logprobs", {-0.25}}, {"text_offset", {1}}}}})}))));
  const json lp = a.Build()["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"], json({"a", "b"}));
  EXPECT_EQ(lp["token_logprobs"], json({-0.5, -0.25}));
  EXPECT_EQ(lp["text_offset"], json({0, 1}));
}

TEST(AssemblerTest, ChatLogprobsConcatenated) {
  Assembler a(Api::kChatCompletions);
  auto chunk = [](const std::string& tok, double lp) {
    return Chunk(json::array({{{"index", 0},
                               {"delta", {{"content", tok}}},
                               {"logprobs", {{"content", {{{"token", tok}, {"logprob", lp}}}}}},
                               {"finish_reason", nullptr}}}));
  };
  ASSERT_TRUE(a.Add(chunk("x", -1)));
  ASSERT_TRUE(a.Add(chunk("y", -2)));
  const json content = a.Build()["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 2u);
  EXPECT_EQ(content[0]["token"], "x");
  EXPECT_EQ(content[1]["token"], "y");
}

TEST(AssemblerTest, ChoicesKeptApartByIndex) {
  Assembler a(Api::kCompletions);
  ASSERT_TRUE(a.Add(Chunk(json::array({Choice({{"index", 1}, {"text", "B"}}),
                                       Choice({{"index", 0}, {"text", "A"}})}))));
  ASSERT_TRUE(a.Add(Chunk(json::array({Choice({{"index", 1}, {"text", "b"}})}))));
  const json out = a.Build();
  ASSERT_EQ(out["choices"].size(), 2u);
  EXPECT_EQ(out["choices"][0]["index"], 0);
  EXPECT_EQ(out["choices"][0]["text"], "A");
  EXPECT_EQ(out["choices"][1]["text"], "Bb");
}

TEST(AssemblerTest, MalformedChunkIsAnErrorAndStopsAssembly) {
  Assembler a(Api::kChatCompletions);
  ASSERT_TRUE(a.Add(Delta({{"content", "ok"}})));
  EXPECT_FALSE(a.Add("{not json"));
  EXPECT_FALSE(a.error().empty());
  EXPECT_FALSE(a.Add(Delta({{"content", "more"}})));  // later calls are ignored
  EXPECT_EQ(a.Build()["choices"][0]["message"]["content"], "ok");
}

TEST(AssemblerTest, NonObjectJsonIsAnError) {
  Assembler a(Api::kCompletions);
  EXPECT_FALSE(a.Add("[1,2,3]"));
  EXPECT_FALSE(a.error().empty());
}

TEST(AssemblerTest, RetainedOutputIsBounded) {
  Assembler a(Api::kCompletions, /*max_bytes=*/10);
  ASSERT_TRUE(a.Add(Chunk(json::array({Choice({{"text", "123456"}})}))));
  EXPECT_FALSE(a.Add(Chunk(json::array({Choice({{"text", "789012"}})}))));
  EXPECT_NE(a.error().find("exceeds 10 bytes"), std::string::npos) << a.error();
  EXPECT_FALSE(a.Add(Chunk(json::array({Choice({{"text", "x"}})}))));
}

TEST(AssemblerTest, ToolCallArgumentsCountTowardsTheBound) {
  Assembler a(Api::kChatCompletions, /*max_bytes=*/8);
  EXPECT_FALSE(a.Add(Delta({{"tool_calls",
                             {{{"index", 0}, {"function", {{"arguments", "0123456789"}}}}}}})));
}

}  // namespace
}  // namespace narwhal::router
