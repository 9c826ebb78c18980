#include <cstdint>
#include <string>
#include <vector>

#include "engines/sim/openai_request.h"
#include "engines/sim/sim_tokenizer.h"
#include "gtest/gtest.h"

namespace narwhal::sim {
namespace {

constexpr char kModel[] = "m";

ParsedRequest Completions(const std::string& body,
                          const std::string& content_type = "application/json",
                          int max_model_len = 1000) {
  return ParseInferenceRequest(Api::kCompletions, content_type, body, kModel, max_model_len);
}

ParsedRequest Chat(const std::string& body) {
  return ParseInferenceRequest(Api::kChat, "application/json", body, kModel, 1000);
}

int StatusOf(const ParsedRequest& parsed) {
  return parsed.error.has_value() ? parsed.error->status : 200;
}

TEST(SimOpenAiRequestTest, AcceptsAPlainCompletion) {
  ParsedRequest parsed = Completions(R"({"model":"m","prompt":"abcdefgh"})");
  ASSERT_FALSE(parsed.error.has_value()) << parsed.error->message;
  EXPECT_EQ(parsed.request.prompt, "abcdefgh");
  EXPECT_EQ(parsed.request.prompt_tokens, 2);
  EXPECT_EQ(parsed.request.max_tokens, kDefaultMaxTokens);
  EXPECT_FALSE(parsed.request.stream);
  EXPECT_EQ(parsed.request.phase(), Phase::kDecode);
  EXPECT_EQ(parsed.request.kv.kind, KvParams::Kind::kNone);
}

TEST(SimOpenAiRequestTest, ContentTypeMustBeJson) {
  EXPECT_EQ(StatusOf(Completions(R"({"prompt":"x"})", "text/plain")), 400);
  EXPECT_EQ(StatusOf(Completions(R"({"prompt":"x"})", "")), 400);
  EXPECT_EQ(StatusOf(Completions(R"({"prompt":"x"})", "Application/JSON; charset=utf-8")), 200);
}

TEST(SimOpenAiRequestTest, RejectsBadBodies) {
  ParsedRequest parsed = Completions("{not json");
  EXPECT_EQ(StatusOf(parsed), 400);
  EXPECT_EQ(StatusOf(Completions("[1,2]")), 400);
  parsed = Completions(R"({"model":"m"})");
  ASSERT_TRUE(parsed.error.has_value());
  EXPECT_EQ(parsed.error->message, "prompt: Field required");
  EXPECT_EQ(StatusOf(Chat(R"({"model":"m"})")), 400);
  EXPECT_EQ(StatusOf(Chat(R"({"messages":[]})")), 400);
  EXPECT_EQ(StatusOf(Chat(R"({"messages":[{"content":"x"}]})")), 400);
  EXPECT_EQ(StatusOf(Completions(R"({"prompt":"x","stream":"yes"})")), 400);
  EXPECT_EQ(StatusOf(Completions(R"({"prompt":"x","max_tokens":"5"})")), 400);
  EXPECT_EQ(StatusOf(Completions(R"({"prompt":{"a":1}})")), 400);
  EXPECT_EQ(StatusOf(Completions(R"({"prompt":"x","n":2})")), 400);
}

TEST(SimOpenAiRequestTest, WrongModelIsNotFound) {
  ParsedRequest parsed = Completions(R"({"model":"other","prompt":"x"})");
  ASSERT_TRUE(parsed.error.has_value());
  EXPECT_EQ(parsed.error->status, 404);
  EXPECT_EQ(parsed.error->type, "NotFoundError");
  EXPECT_EQ(parsed.error->message, "The model `other` does not exist.");
  EXPECT_EQ(parsed.error->param, "model");
  // A request may omit the model.
  EXPECT_EQ(StatusOf(Completions(R"({"prompt":"x"})")), 200);
}

TEST(SimOpenAiRequestTest, StreamOptionsNeedStreaming) {
  ParsedRequest parsed = Completions(R"({"prompt":"x","stream_options":{"include_usage":true}})");
  ASSERT_TRUE(parsed.error.has_value());
  EXPECT_EQ(parsed.error->status, 400);
  EXPECT_EQ(parsed.error->message, "Stream options can only be defined when `stream=True`.");
}

TEST(SimOpenAiRequestTest, IncludeUsageDefaultsToTrueWithStreamOptions) {
  EXPECT_TRUE(
      Completions(R"({"prompt":"x","stream":true,"stream_options":{}})").request.include_usage);
  EXPECT_FALSE(Completions(R"({"prompt":"x","stream":true,
      "stream_options":{"include_usage":false}})")
                   .request.include_usage);
  EXPECT_FALSE(Completions(R"({"prompt":"x","stream":true})").request.include_usage);
  EXPECT_TRUE(Completions(R"({"prompt":"x","stream":true,
      "stream_options":{"continuous_usage_stats":true}})")
                  .request.continuous_usage);
}

TEST(SimOpenAiRequestTest, TokenLimits) {
  EXPECT_EQ(Completions(R"({"prompt":"x","max_tokens":5})").request.max_tokens, 5);
  EXPECT_EQ(Chat(R"({"messages":[{"role":"user","content":"x"}],
      "max_tokens":5,"max_completion_tokens":7})")
                .request.max_tokens,
            7);
  EXPECT_EQ(StatusOf(Completions(R"({"prompt":"x","max_tokens":0})")), 400);
  ParsedRequest parsed = Completions(R"({"prompt":"x","max_tokens":3,"min_tokens":4})");
  ASSERT_TRUE(parsed.error.has_value());
  EXPECT_EQ(parsed.error->status, 400);
  EXPECT_EQ(parsed.error->message, "min_tokens must be less than or equal to max_tokens=3, got 4.");
  EXPECT_EQ(StatusOf(Completions(R"({"prompt":"x","max_tokens":3,"min_tokens":3})")), 200);
}

TEST(SimOpenAiRequestTest, ContextLength) {
  const std::string long_prompt(4 * 100, 'a');  // 100 tokens
  ParsedRequest parsed =
      Completions(R"({"prompt":")" + long_prompt + R"("})", "application/json", 100);
  ASSERT_TRUE(parsed.error.has_value());
  EXPECT_EQ(parsed.error->status, 400);
  EXPECT_EQ(parsed.error->type, "BadRequestError");
  EXPECT_NE(parsed.error->message.find("maximum context length is 100 tokens"), std::string::npos);
  parsed = Completions(R"({"prompt":")" + long_prompt + R"(","max_tokens":60})", "application/json",
                       150);
  ASSERT_TRUE(parsed.error.has_value());
  EXPECT_NE(parsed.error->message.find("you requested 160 tokens"), std::string::npos);
  // Without an explicit limit the default shrinks to the room left.
  parsed = Completions(R"({"prompt":")" + long_prompt + R"("})", "application/json", 105);
  ASSERT_FALSE(parsed.error.has_value());
  EXPECT_EQ(parsed.request.max_tokens, 5);
}

TEST(SimOpenAiRequestTest, PromptForms) {
  EXPECT_EQ(Completions(R"({"prompt":["abc"]})").request.prompt, "abc");
  ParsedRequest ids = Completions(R"({"prompt":[1,2,3,4,5]})");
  ASSERT_FALSE(ids.error.has_value());
  EXPECT_EQ(ids.request.prompt, "1 2 3 4 5");
  EXPECT_EQ(ids.request.prompt_tokens, 5);
  EXPECT_EQ(Completions(R"({"prompt":[[7,8]]})").request.prompt_tokens, 2);
  EXPECT_EQ(StatusOf(Completions(R"({"prompt":["a","b"]})")), 400);
}

TEST(SimOpenAiRequestTest, PromptIds) {
  // Text prompts are tokenized; token-id prompts are their ids.
  ParsedRequest text = Completions(R"({"prompt":"abcdefghi"})");
  EXPECT_EQ(text.request.prompt_ids, SimTokenize("abcdefghi"));
  EXPECT_FALSE(text.request.token_id_prompt);
  EXPECT_EQ(Completions(R"({"prompt":["abcdefghi"]})").request.prompt_ids,
            SimTokenize("abcdefghi"));
  ParsedRequest ids = Completions(R"({"prompt":[0,151643,151706,4294967295]})");
  ASSERT_FALSE(ids.error.has_value()) << ids.error->message;
  EXPECT_EQ(ids.request.prompt_ids, (std::vector<uint32_t>{0, 151643, 151706, 4294967295u}));
  EXPECT_TRUE(ids.request.token_id_prompt);
  EXPECT_EQ(Completions(R"({"prompt":[[7,8]]})").request.prompt_ids, (std::vector<uint32_t>{7, 8}));
  EXPECT_EQ(Chat(R"({"messages":[{"role":"user","content":"Hi there"}]})").request.prompt_ids,
            SimTokenize("Hi there"));
  // Ids outside 0..2^32-1 are not token ids.
  for (const char* body : {R"({"prompt":[1,-1]})", R"({"prompt":[4294967296]})",
                           R"({"prompt":[[18446744073709551615]]})", R"({"prompt":[1.5]})"}) {
    const ParsedRequest parsed = Completions(body);
    ASSERT_TRUE(parsed.error.has_value()) << body;
    EXPECT_EQ(parsed.error->message,
              "prompt: Input should be a string, a list of strings, a list of "
              "token ids or a list of token-id lists");
  }
}

TEST(SimOpenAiRequestTest, ReturnTokenIds) {
  EXPECT_FALSE(Completions(R"({"prompt":"x"})").request.return_token_ids);
  EXPECT_FALSE(Completions(R"({"prompt":"x","return_token_ids":null})").request.return_token_ids);
  EXPECT_FALSE(Completions(R"({"prompt":"x","return_token_ids":false})").request.return_token_ids);
  EXPECT_TRUE(Completions(R"({"prompt":"x","return_token_ids":true})").request.return_token_ids);
  EXPECT_TRUE(Chat(R"({"messages":[{"role":"user","content":"x"}],"return_token_ids":true})")
                  .request.return_token_ids);
  for (const char* value : {"1", "\"true\"", "[]", "{}"}) {
    const ParsedRequest parsed =
        Completions(std::string(R"({"prompt":"x","return_token_ids":)") + value + "}");
    ASSERT_TRUE(parsed.error.has_value()) << value;
    EXPECT_EQ(parsed.error->status, 400);
    EXPECT_EQ(parsed.error->type, "Bad Request");
    EXPECT_EQ(parsed.error->message, "return_token_ids: Input should be a valid boolean");
  }
}

TEST(SimOpenAiRequestTest, ChatPromptIsTheConcatenatedContents) {
  ParsedRequest parsed = Chat(R"({"messages":[
      {"role":"system","content":"Be brief."},
      {"role":"user","content":[{"type":"text","text":"Hi "},
                                {"type":"image_url","image_url":{}},
                                {"type":"text","text":"there"}]},
      {"role":"assistant","content":null}]})");
  ASSERT_FALSE(parsed.error.has_value()) << parsed.error->message;
  EXPECT_EQ(parsed.request.prompt, "Be brief.Hi there");
}

TEST(SimOpenAiRequestTest, ProducerRequests) {
  ParsedRequest parsed = Completions(R"({"prompt":"x","max_tokens":1,
      "kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false,
      "remote_engine_id":null,"remote_block_ids":null,"remote_host":null,
      "remote_port":null}})");
  ASSERT_FALSE(parsed.error.has_value());
  EXPECT_EQ(parsed.request.kv.kind, KvParams::Kind::kProducer);
  EXPECT_EQ(parsed.request.phase(), Phase::kPrefill);

  parsed = Completions(R"({"prompt":"x","stream":true,
      "kv_transfer_params":{"do_remote_decode":true}})");
  ASSERT_TRUE(parsed.error.has_value());
  EXPECT_EQ(parsed.error->status, 400);
  EXPECT_EQ(parsed.error->message,
            "KV-transfer producer requests are not supported with streaming");
}

TEST(SimOpenAiRequestTest, ConsumerParams) {
  KvParams kv = ParseKvParams(nlohmann::json::parse(R"({
      "do_remote_prefill":true,"do_remote_decode":false,
      "remote_block_ids":[[1,2]],"remote_engine_id":"p0",
      "remote_request_id":"cmpl-a-12345678","remote_host":"127.0.0.1",
      "remote_port":8000,"tp_size":1})"));
  EXPECT_EQ(kv.kind, KvParams::Kind::kConsumer);
  EXPECT_EQ(kv.remote_engine_id, "p0");
  EXPECT_EQ(kv.remote_port, 8000);
  EXPECT_EQ(kv.remote_block_ids, nlohmann::json::parse("[[1,2]]"));

  kv = ParseKvParams(nlohmann::json::parse(R"({
      "do_remote_prefill":true,"remote_block_ids":[],
      "remote_request_id":"r","remote_host":"h","remote_port":"80"})"));
  EXPECT_EQ(kv.kind, KvParams::Kind::kConsumerIncomplete);
  EXPECT_EQ(kv.missing, "remote_engine_id, remote_block_ids");

  EXPECT_EQ(ParseKvParams(nlohmann::json()).kind, KvParams::Kind::kNone);
  EXPECT_EQ(ParseKvParams(nlohmann::json::parse(R"({"do_remote_prefill":false})")).kind,
            KvParams::Kind::kNone);
}

}  // namespace
}  // namespace narwhal::sim
