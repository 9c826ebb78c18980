// The request limits of the `limits` config section and the finite-number
// rule of the gRPC door, at the validation both doors share
// (server/openai_request, server/grpc/grpc_request): each refusal is a 400 that
// names the field and says exactly what is wrong.
#include <grpcpp/impl/grpc_library.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "server/grpc/grpc_request.h"
#include "server/openai_request.h"

namespace narwhal::server {
namespace {

using json = nlohmann::json;
using engines::Api;

router::LimitSettings Limits(int max_tokens, int max_messages, int max_prompts) {
  router::LimitSettings l;
  l.max_tokens = max_tokens;
  l.max_messages = max_messages;
  l.max_prompts = max_prompts;
  return l;
}

// The refusal of `body` (completions unless `api` says otherwise).
ClientError Refusal(const std::string& body, const router::LimitSettings& limits,
                    Api api = Api::kCompletions) {
  const ParsedRequest p = ParseOpenAiRequest(body, api, "m", limits);
  EXPECT_FALSE(p.ok) << body;
  return p.error;
}

std::string WithMaxTokens(const std::string& field, const std::string& value) {
  return R"({"model":"m","prompt":"hi",")" + field + "\":" + value + "}";
}

TEST(RequestLimitsTest, MaxTokensWithinTheLimitIsAccepted) {
  const router::LimitSettings limits = Limits(100, 10, 10);
  for (const char* field : {"max_tokens", "max_completion_tokens"}) {
    for (const char* value : {"1", "100", "null"}) {
      const ParsedRequest p =
          ParseOpenAiRequest(WithMaxTokens(field, value), Api::kCompletions, "m", limits);
      EXPECT_TRUE(p.ok) << field << "=" << value << ": " << p.error.message;
    }
  }
}

TEST(RequestLimitsTest, MaxTokensAboveTheLimitSaysTheLimit) {
  const router::LimitSettings limits = Limits(100, 10, 10);
  for (const char* field : {"max_tokens", "max_completion_tokens"}) {
    const ClientError e = Refusal(WithMaxTokens(field, "101"), limits);
    EXPECT_EQ(e.reason, router::Reason::kInvalidRequest);
    EXPECT_EQ(e.param, field);
    EXPECT_EQ(e.message, std::string(field) + " must be at most 100 (got 101)");
  }
}

TEST(RequestLimitsTest, MaxTokensBeyondEveryIntegerTypeIsTooLargeNotNegative) {
  const router::LimitSettings limits = Limits(100, 10, 10);
  // 2^63 (just past INT64_MAX), UINT64_MAX, 2^64 and beyond, 1e30.
  EXPECT_EQ(Refusal(WithMaxTokens("max_tokens", "9223372036854775808"), limits).message,
            "max_tokens must be at most 100 (got 9223372036854775808)");
  EXPECT_EQ(Refusal(WithMaxTokens("max_tokens", "18446744073709551615"), limits).message,
            "max_tokens must be at most 100 (got 18446744073709551615)");
  for (const char* huge : {"18446744073709551616", "100000000000000000000000", "1e30"}) {
    const std::string m = Refusal(WithMaxTokens("max_tokens", huge), limits).message;
    EXPECT_EQ(m.rfind("max_tokens must be at most 100 (got ", 0), 0u) << huge << ": " << m;
  }
  EXPECT_EQ(Refusal(WithMaxTokens("max_tokens", "-9223372036854775809"), limits)
                .message.rfind("max_tokens must be >= 1 (got ", 0),
            0u);
}

TEST(RequestLimitsTest, MaxTokensThatIsNotAPositiveIntegerSaysWhy) {
  const router::LimitSettings limits = Limits(100, 10, 10);
  EXPECT_EQ(Refusal(WithMaxTokens("max_tokens", "0"), limits).message,
            "max_tokens must be >= 1 (got 0)");
  EXPECT_EQ(Refusal(WithMaxTokens("max_tokens", "-5"), limits).message,
            "max_tokens must be >= 1 (got -5)");
  EXPECT_EQ(Refusal(WithMaxTokens("max_tokens", "2.5"), limits).message,
            "max_tokens must be an integer (got 2.5)");
  EXPECT_EQ(Refusal(WithMaxTokens("max_completion_tokens", "3.0"), limits).message,
            "max_completion_tokens must be an integer (got 3.0)");
  EXPECT_EQ(Refusal(WithMaxTokens("max_tokens", "\"12\""), limits).message,
            "max_tokens must be an integer (got string)");
  EXPECT_EQ(Refusal(WithMaxTokens("max_tokens", "true"), limits).message,
            "max_tokens must be an integer (got boolean)");
}

TEST(RequestLimitsTest, DefaultLimitIs131072) {
  EXPECT_EQ(router::LimitSettings().max_tokens, 131072);
  EXPECT_TRUE(ParseOpenAiRequest(WithMaxTokens("max_tokens", "131072"), Api::kCompletions, "m").ok);
  EXPECT_EQ(ParseOpenAiRequest(WithMaxTokens("max_tokens", "131073"), Api::kCompletions, "m")
                .error.message,
            "max_tokens must be at most 131072 (got 131073)");
}

std::string Chat(int messages) {
  json list = json::array();
  for (int i = 0; i < messages; ++i) list.push_back({{"role", "user"}, {"content", "hi"}});
  return json{{"model", "m"}, {"messages", list}}.dump();
}

TEST(RequestLimitsTest, MessagesBeyondTheLimitAreRefused) {
  const router::LimitSettings limits = Limits(100, 3, 10);
  EXPECT_TRUE(ParseOpenAiRequest(Chat(3), Api::kChatCompletions, "m", limits).ok);
  const ClientError e = Refusal(Chat(4), limits, Api::kChatCompletions);
  EXPECT_EQ(e.reason, router::Reason::kInvalidRequest);
  EXPECT_EQ(e.param, "messages");
  EXPECT_EQ(e.message, "messages must have at most 3 entries (got 4)");
  EXPECT_EQ(router::LimitSettings().max_messages, 4096);
}

std::string WithPrompt(const json& prompt) {
  return json{{"model", "m"}, {"prompt", prompt}}.dump();
}

TEST(RequestLimitsTest, PromptListsBeyondTheLimitAreRefused) {
  const router::LimitSettings limits = Limits(100, 10, 2);
  // One prompt however long: a string, a list of token ids.
  EXPECT_TRUE(ParseOpenAiRequest(WithPrompt("one"), Api::kCompletions, "m", limits).ok);
  EXPECT_TRUE(
      ParseOpenAiRequest(WithPrompt(json::array({1, 2, 3, 4, 5})), Api::kCompletions, "m", limits)
          .ok);
  EXPECT_TRUE(
      ParseOpenAiRequest(WithPrompt(json::array({"a", "b"})), Api::kCompletions, "m", limits).ok);
  for (const json& prompt : {json::array({"a", "b", "c"}),
                             json::array({json::array({1}), json::array({2}), json::array({3})})}) {
    const ClientError e = Refusal(WithPrompt(prompt), limits);
    EXPECT_EQ(e.param, "prompt");
    EXPECT_EQ(e.message, "prompt must hold at most 2 prompts (got 3)");
  }
  EXPECT_EQ(router::LimitSettings().max_prompts, 1024);
}

// --- the gRPC door -----------------------------------------------------------

narwhal::v1::GenerateRequest GrpcPrompt() {
  narwhal::v1::GenerateRequest r;
  r.set_model("m");
  r.set_prompt("hi");
  return r;
}

TEST(RequestLimitsTest, GrpcDoorAppliesTheSameLimits) {
  const router::LimitSettings limits = Limits(100, 2, 10);
  narwhal::v1::GenerateRequest r = GrpcPrompt();
  r.set_max_tokens(100);
  EXPECT_TRUE(TranslateGenerateRequest(r, true, "m", limits).parsed.ok);
  r.set_max_tokens(4294967295u);
  GrpcParsedRequest out = TranslateGenerateRequest(r, true, "m", limits);
  ASSERT_FALSE(out.parsed.ok);
  EXPECT_EQ(out.parsed.error.message, "max_tokens must be at most 100 (got 4294967295)");
  r.clear_max_tokens();
  // From `extra` a whole number arrives as a signed integer.
  (*r.mutable_extra()->mutable_fields())["max_tokens"].set_number_value(101);
  out = TranslateGenerateRequest(r, true, "m", limits);
  ASSERT_FALSE(out.parsed.ok);
  EXPECT_EQ(out.parsed.error.message, "max_tokens must be at most 100 (got 101)");
  r.mutable_extra()->mutable_fields()->erase("max_tokens");
  (*r.mutable_extra()->mutable_fields())["max_completion_tokens"].set_number_value(2.5);
  out = TranslateGenerateRequest(r, true, "m", limits);
  ASSERT_FALSE(out.parsed.ok);
  EXPECT_EQ(out.parsed.error.message, "max_completion_tokens must be an integer (got 2.5)");

  narwhal::v1::GenerateRequest chat;
  chat.set_model("m");
  for (int i = 0; i < 3; ++i) {
    auto* m = chat.mutable_messages()->add_messages();
    m->set_role("user");
    m->set_content("hi");
  }
  out = TranslateGenerateRequest(chat, false, "m", limits);
  ASSERT_FALSE(out.parsed.ok);
  EXPECT_EQ(out.parsed.error.message, "messages must have at most 2 entries (got 3)");
}

TEST(RequestLimitsTest, NonFiniteNumbersInExtraAreRefused) {
  for (const double bad : {std::nan(""), std::numeric_limits<double>::infinity(),
                           -std::numeric_limits<double>::infinity()}) {
    narwhal::v1::GenerateRequest r = GrpcPrompt();
    (*r.mutable_extra()->mutable_fields())["logprobs"].set_number_value(bad);
    const GrpcParsedRequest out = TranslateGenerateRequest(r, true, "m");
    ASSERT_FALSE(out.parsed.ok);
    EXPECT_EQ(out.parsed.error.reason, router::Reason::kInvalidRequest);
    EXPECT_EQ(out.parsed.error.param, "extra");
    EXPECT_EQ(out.parsed.error.message, "extra.logprobs must be a finite number");
  }
}

TEST(RequestLimitsTest, NonFiniteNumberDeepInExtraIsNamedByItsPath) {
  narwhal::v1::GenerateRequest r = GrpcPrompt();
  auto& tools = (*r.mutable_extra()->mutable_fields())["tools"];
  auto* list = tools.mutable_list_value();
  list->add_values()->set_string_value("fine");
  auto& fn = (*list->add_values()->mutable_struct_value()->mutable_fields())["function"];
  (*fn.mutable_struct_value()->mutable_fields())["weight"].set_number_value(std::nan(""));
  const GrpcParsedRequest out = TranslateGenerateRequest(r, true, "m");
  ASSERT_FALSE(out.parsed.ok);
  EXPECT_EQ(out.parsed.error.message, "extra.tools[1].function.weight must be a finite number");
}

TEST(RequestLimitsTest, PathOfANonFiniteNumberIsShownCut) {
  google::protobuf::Struct s;
  const std::string long_key(10000, 'k');
  auto& inner = (*s.mutable_fields())[long_key];
  (*inner.mutable_struct_value()->mutable_fields())["x"].set_number_value(std::nan(""));
  const std::string path = NonFiniteNumberPath(s);
  EXPECT_LE(path.size(), 70u);
  EXPECT_EQ(path.substr(path.size() - 3), "...");
  // A cut never splits a character.
  google::protobuf::Struct utf8;
  (*utf8.mutable_fields())[std::string(63, 'a') + "\xc3\xa9" + "tail"].set_number_value(
      std::numeric_limits<double>::infinity());
  EXPECT_EQ(NonFiniteNumberPath(utf8), std::string(63, 'a') + "...");
  EXPECT_EQ(NonFiniteNumberPath(google::protobuf::Struct()), "");
}

TEST(RequestLimitsTest, NonFiniteTypedFieldsAreRefused) {
  narwhal::v1::GenerateRequest r = GrpcPrompt();
  r.set_temperature(std::nan(""));
  GrpcParsedRequest out = TranslateGenerateRequest(r, true, "m");
  ASSERT_FALSE(out.parsed.ok);
  EXPECT_EQ(out.parsed.error.message, "temperature must be a finite number");
  EXPECT_EQ(out.parsed.error.param, "temperature");
  r.set_temperature(0.5);
  r.set_repetition_penalty(-std::numeric_limits<double>::infinity());
  out = TranslateGenerateRequest(r, true, "m");
  ASSERT_FALSE(out.parsed.ok);
  EXPECT_EQ(out.parsed.error.message, "repetition_penalty must be a finite number");
  r.set_repetition_penalty(1.1);
  EXPECT_TRUE(TranslateGenerateRequest(r, true, "m").parsed.ok);
}

// The committed fuzz input (a NaN `logprobs` in `extra`) is refused now, not
// sent on as null.
TEST(RequestLimitsTest, FuzzRegressionNanNumberValueIsRefused) {
  static grpc::internal::GrpcLibraryInitializer grpc_library;
  std::ifstream in(std::string(NARWHAL_SOURCE_DIR) +
                       "/tests/fuzz/regressions/fuzz_grpc_request/nan_number_value",
                   std::ios::binary);
  ASSERT_TRUE(in.good());
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  grpc::Slice slice(bytes);
  const grpc::ByteBuffer buffer(&slice, 1);
  narwhal::v1::GenerateRequest request;
  DecodeError error;
  ASSERT_TRUE(DecodeGenerateRequest(buffer, 4194304, &request, &error)) << error.message;
  for (const bool stream : {true, false}) {
    const GrpcParsedRequest out = TranslateGenerateRequest(request, stream, "Qwen/Qwen3-0.6B");
    ASSERT_FALSE(out.parsed.ok);
    EXPECT_EQ(out.parsed.error.reason, router::Reason::kInvalidRequest);
    EXPECT_EQ(out.parsed.error.message, "extra.logprobs must be a finite number");
  }
}

}  // namespace
}  // namespace narwhal::server
