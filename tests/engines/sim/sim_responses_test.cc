#include "engines/sim/responses.h"

#include "gtest/gtest.h"

namespace narwhal::sim {
namespace {

ResponseContext Ctx(Api api) {
  ResponseContext ctx;
  ctx.api = api;
  ctx.id = api == Api::kChat ? "chatcmpl-r1" : "cmpl-r1";
  ctx.created = 1754400001;
  ctx.model = "m";
  ctx.system_fingerprint = "vllm-0.29.1-0badf00d";
  return ctx;
}

TEST(SimResponsesTest, ErrorFrameUsesPythonSpacing) {
  EXPECT_EQ(ErrorFrame("Internal server error", "InternalServerError", 500),
            "data: {\"error\": {\"message\": \"Internal server error\", "
            "\"type\": \"InternalServerError\", \"param\": null, \"code\": "
            "500}}\n\n");
  EXPECT_EQ(ErrorFrame("caf\xc3\xa9", "T", "x"),
            "data: {\"error\": {\"message\": \"caf\\u00e9\", \"type\": \"T\", "
            "\"param\": null, \"code\": \"x\"}}\n\n");
}

TEST(SimResponsesTest, ErrorBodyIsCompact) {
  EXPECT_EQ(ErrorBody({404, "NotFoundError", "The model `x` does not exist.",
                       std::string("model")}),
            "{\"error\":{\"message\":\"The model `x` does not exist.\","
            "\"type\":\"NotFoundError\",\"param\":\"model\",\"code\":404}}");
  EXPECT_EQ(ErrorBody({400, "BadRequestError", "m", std::nullopt}),
            "{\"error\":{\"message\":\"m\",\"type\":\"BadRequestError\","
            "\"param\":null,\"code\":400}}");
}

TEST(SimResponsesTest, CompletionChunks) {
  EXPECT_EQ(SseEvent(TokenChunk(Ctx(Api::kCompletions), " Paris", std::nullopt)),
            "data: {\"id\":\"cmpl-r1\",\"object\":\"text_completion\","
            "\"created\":1754400001,\"model\":\"m\",\"choices\":[{\"index\":0,"
            "\"text\":\" Paris\",\"logprobs\":null,\"finish_reason\":null,"
            "\"stop_reason\":null}]}\n\n");
  const OrderedJson last =
      TokenChunk(Ctx(Api::kCompletions), ".", std::string("length"));
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(last["system_fingerprint"], "vllm-0.29.1-0badf00d");
  EXPECT_EQ(MetadataChunk(Ctx(Api::kCompletions))["choices"][0]["text"], "");
}

TEST(SimResponsesTest, ChatChunks) {
  EXPECT_EQ(Dump(RoleChunk(Ctx(Api::kChat))),
            "{\"id\":\"chatcmpl-r1\",\"object\":\"chat.completion.chunk\","
            "\"created\":1754400001,\"model\":\"m\",\"choices\":[{\"index\":0,"
            "\"delta\":{\"role\":\"assistant\",\"content\":\"\"},"
            "\"logprobs\":null,\"finish_reason\":null}]}");
  EXPECT_EQ(Dump(TokenChunk(Ctx(Api::kChat), " Paris", std::nullopt)),
            "{\"id\":\"chatcmpl-r1\",\"object\":\"chat.completion.chunk\","
            "\"created\":1754400001,\"model\":\"m\",\"choices\":[{\"index\":0,"
            "\"delta\":{\"content\":\" Paris\"},\"logprobs\":null,"
            "\"finish_reason\":null}]}");
  const OrderedJson last = TokenChunk(Ctx(Api::kChat), ".", std::string("length"));
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(last["choices"][0]["stop_reason"].is_null());
}

TEST(SimResponsesTest, UsageChunk) {
  EXPECT_EQ(Dump(UsageChunk(Ctx(Api::kChat), Usage{14, 2})),
            "{\"id\":\"chatcmpl-r1\",\"object\":\"chat.completion.chunk\","
            "\"created\":1754400001,\"model\":\"m\",\"choices\":[],"
            "\"usage\":{\"prompt_tokens\":14,\"total_tokens\":16,"
            "\"completion_tokens\":2},\"system_fingerprint\":"
            "\"vllm-0.29.1-0badf00d\"}");
}

TEST(SimResponsesTest, FullBodies) {
  const OrderedJson chat = FullBody(Ctx(Api::kChat), " a b", "length",
                                    Usage{3, 2}, nullptr);
  EXPECT_EQ(chat["object"], "chat.completion");
  EXPECT_EQ(chat["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(chat["choices"][0]["message"]["content"], " a b");
  EXPECT_EQ(chat["usage"]["total_tokens"], 5);
  EXPECT_TRUE(chat.contains("kv_transfer_params"));
  EXPECT_TRUE(chat["kv_transfer_params"].is_null());
  const OrderedJson completion = FullBody(Ctx(Api::kCompletions), " a", "length",
                                          Usage{3, 1}, OrderedJson{{"k", 1}});
  EXPECT_EQ(completion["object"], "text_completion");
  EXPECT_EQ(completion["choices"][0]["text"], " a");
  EXPECT_EQ(completion["kv_transfer_params"]["k"], 1);
  EXPECT_EQ(completion["system_fingerprint"], "vllm-0.29.1-0badf00d");
}

TEST(SimResponsesTest, ModelList) {
  const OrderedJson list = ModelList("m", 4096, 7);
  EXPECT_EQ(list["object"], "list");
  const OrderedJson& card = list["data"][0];
  EXPECT_EQ(card["id"], "m");
  EXPECT_EQ(card["object"], "model");
  EXPECT_EQ(card["owned_by"], "vllm");
  EXPECT_EQ(card["root"], "m");
  EXPECT_TRUE(card["parent"].is_null());
  EXPECT_EQ(card["max_model_len"], 4096);
  EXPECT_TRUE(card["permission"].is_array());
}

TEST(SimResponsesTest, ErrorTypes) {
  EXPECT_EQ(ErrorTypeForStatus(400), "BadRequestError");
  EXPECT_EQ(ErrorTypeForStatus(404), "NotFoundError");
  EXPECT_EQ(ErrorTypeForStatus(500), "InternalServerError");
  EXPECT_EQ(ErrorTypeForStatus(503), "Service Unavailable");
}

}  // namespace
}  // namespace narwhal::sim
