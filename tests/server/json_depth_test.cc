// Every JSON input has a nesting bound (hardening): a deeply nested document
// from a client, an engine, a gRPC Struct or a config file gets a clear error
// and never reaches code that copies or prints it recursively (where it
// overflowed a thread's stack and killed the process). Every one also has a
// bound on the memory it may take once parsed (engines/json_limits.h): a
// 4 MiB body of empty objects took 167 MB for its request's life.
#include <gtest/gtest.h>

#include <string>

#include "absl/strings/match.h"
#include "engines/engine_failure.h"
#include "engines/json_limits.h"
#include "router/assembler.h"
#include "server/admission.h"
#include "server/config/config_loader.h"
#include "server/grpc/grpc_request.h"
#include "server/openai_request.h"

namespace narwhal::server {
namespace {

// An array nested `depth` levels deep.
std::string DeepArray(int depth) { return std::string(depth, '[') + std::string(depth, ']'); }

constexpr int kHostileDepth = 80000;  // the ~160 KB body that crashed the router

TEST(JsonDepthTest, ClientBodyTooDeepIs400) {
  const std::string body = R"({"model":"m","messages":[{"role":"user","content":"hi","x":)" +
                           DeepArray(kHostileDepth) + "}]}";
  const ParsedRequest p = ParseOpenAiRequest(body, engines::Api::kChatCompletions, "m");
  ASSERT_FALSE(p.ok);
  EXPECT_EQ(p.error.reason, router::Reason::kInvalidRequest);
  EXPECT_TRUE(absl::StrContains(p.error.message, "nests deeper than 128 levels"))
      << p.error.message;
}

TEST(JsonDepthTest, ClientBodyAtTheLimitIsAccepted) {
  // The body object is level 1, so a value may nest 127 more levels.
  const std::string body =
      R"({"model":"m","prompt":"hi","x":)" + DeepArray(engines::kMaxJsonDepth - 1) + "}";
  const ParsedRequest p = ParseOpenAiRequest(body, engines::Api::kCompletions, "m");
  EXPECT_TRUE(p.ok) << p.error.message;
  const std::string over =
      R"({"model":"m","prompt":"hi","x":)" + DeepArray(engines::kMaxJsonDepth) + "}";
  EXPECT_FALSE(ParseOpenAiRequest(over, engines::Api::kCompletions, "m").ok);
}

// Closers before any opener used to drive the bound's depth below zero and
// write out of bounds: a client body "}}{" crashed the router. It is a
// malformed body like any other now (400), and so is an engine's answer or
// error body of that shape.
TEST(JsonDepthTest, BodyThatClosesBeforeItOpensIs400) {
  for (const char* body : {"}}{", "]]]]{\"model\":\"m\",\"prompt\":\"hi\"}", "}]{\"a\":[{}]}"}) {
    SCOPED_TRACE(body);
    const ParsedRequest p = ParseOpenAiRequest(body, engines::Api::kCompletions, "m");
    ASSERT_FALSE(p.ok);
    EXPECT_EQ(p.error.reason, router::Reason::kInvalidRequest);
    EXPECT_FALSE(engines::EngineErrorMessage(body).empty());
  }
}

google::protobuf::Struct DeepStruct(int depth) {
  google::protobuf::Struct root;
  google::protobuf::Struct* s = &root;
  for (int i = 1; i < depth; ++i) s = (*s->mutable_fields())["x"].mutable_struct_value();
  (*s->mutable_fields())["leaf"].set_number_value(1);
  return root;
}

TEST(JsonDepthTest, StructDepthIsMeasuredLikeJson) {
  EXPECT_TRUE(StructDepthWithin(DeepStruct(1), 1));
  EXPECT_TRUE(StructDepthWithin(DeepStruct(5), 5));
  EXPECT_FALSE(StructDepthWithin(DeepStruct(6), 5));
  google::protobuf::Struct lists;
  google::protobuf::Value* v = &(*lists.mutable_fields())["l"];
  for (int i = 0; i < 3; ++i) v = v->mutable_list_value()->add_values();
  v->set_string_value("leaf");
  EXPECT_TRUE(StructDepthWithin(lists, 4));  // {l:[[[ "leaf" ]]]}
  EXPECT_FALSE(StructDepthWithin(lists, 3));
}

TEST(JsonDepthTest, GrpcExtraTooDeepIs400) {
  narwhal::v1::GenerateRequest request;
  request.set_model("m");
  request.set_prompt("hi");
  *request.mutable_extra() = DeepStruct(5000);
  const GrpcParsedRequest out = TranslateGenerateRequest(request, true, "m");
  ASSERT_FALSE(out.parsed.ok);
  EXPECT_EQ(out.parsed.error.reason, router::Reason::kInvalidRequest);
  EXPECT_EQ(out.parsed.error.param, "extra");
  EXPECT_TRUE(absl::StrContains(out.parsed.error.message, "nests deeper"))
      << out.parsed.error.message;

  *request.mutable_extra() = DeepStruct(20);
  EXPECT_TRUE(TranslateGenerateRequest(request, true, "m").parsed.ok);
}

TEST(JsonDepthTest, ConfigTooDeepIsAConfigError) {
  const std::string text = R"({"model":"m","engines":[{"iid":"a","url":"http://127.0.0.1:1"}],)"
                           R"("serving":{"max_attempts":)" +
                           DeepArray(kHostileDepth) + "}}";
  const auto loaded = ParseFleetConfig(text);
  ASSERT_FALSE(loaded.ok());
  EXPECT_TRUE(absl::StrContains(loaded.status().message(), "nests deeper than 128 levels"))
      << loaded.status().message();
}

TEST(JsonDepthTest, EngineErrorBodyTooDeepIsReportedAsText) {
  const std::string body = R"({"error":{"message":)" + DeepArray(kHostileDepth) + "}}";
  const std::string message = engines::EngineErrorMessage(body);
  EXPECT_FALSE(message.empty());
  EXPECT_LE(message.size(), 600u);  // the raw text, truncated
}

TEST(JsonDepthTest, DecodeChunkTooDeepFailsAssembly) {
  router::Assembler assembler(engines::Api::kCompletions);
  const std::string chunk =
      R"({"choices":[{"index":0,"text":"a","logprobs":)" + DeepArray(kHostileDepth) + "}]}";
  EXPECT_FALSE(assembler.Add(chunk));
  EXPECT_TRUE(absl::StrContains(assembler.error(), "nests deeper")) << assembler.error();
}

// Empty objects, `n` of them, as a JSON array.
std::string EmptyObjects(size_t n) {
  std::string s = "[";
  for (size_t i = 0; i < n; ++i) s += i == 0 ? "{}" : ",{}";
  return s + "]";
}

constexpr size_t kHostileObjects = 1390000;  // the issue's 4 MiB body

TEST(JsonCostTest, ClientBodyOfEmptyObjectsIs413) {
  const std::string body =
      R"({"model":"m","prompt":"hi","logit_bias":{},"x":)" + EmptyObjects(kHostileObjects) + "}";
  ASSERT_LT(body.size(), 4u << 20);  // under the default max_request_bytes
  const ParsedRequest p = ParseOpenAiRequest(body, engines::Api::kCompletions, "m");
  ASSERT_FALSE(p.ok);
  EXPECT_EQ(p.error.reason, router::Reason::kTooLarge);
  EXPECT_TRUE(absl::StrContains(p.error.message, "request body would take more than"))
      << p.error.message;
  EXPECT_EQ(RefusalFor(p.error).reason, router::Reason::kTooLarge);
  // The same body with its bytes in one string is an ordinary request.
  const std::string text = R"({"model":"m","prompt":")" + std::string(body.size(), 'a') + R"("})";
  EXPECT_TRUE(ParseOpenAiRequest(text, engines::Api::kCompletions, "m").ok);
}

TEST(JsonCostTest, GrpcExtraOfEmptyStructsIs413) {
  narwhal::v1::GenerateRequest request;
  request.set_model("m");
  request.set_prompt("hi");
  google::protobuf::ListValue* list =
      (*request.mutable_extra()->mutable_fields())["x"].mutable_list_value();
  for (size_t i = 0; i < 300000; ++i) list->add_values()->mutable_struct_value();
  const GrpcParsedRequest out = TranslateGenerateRequest(request, true, "m");
  ASSERT_FALSE(out.parsed.ok);
  EXPECT_EQ(out.parsed.error.reason, router::Reason::kTooLarge);
  EXPECT_EQ(out.parsed.error.param, "extra");
  EXPECT_TRUE(absl::StrContains(out.parsed.error.message, "would take more than"))
      << out.parsed.error.message;

  // Ordinary extra fields of the same wire size are taken.
  narwhal::v1::GenerateRequest ordinary;
  ordinary.set_model("m");
  ordinary.set_prompt("hi");
  (*ordinary.mutable_extra()->mutable_fields())["user"].set_string_value(std::string(600000, 'u'));
  EXPECT_TRUE(TranslateGenerateRequest(ordinary, true, "m").parsed.ok);
}

TEST(JsonCostTest, ConfigOfEmptyObjectsIsAConfigError) {
  const std::string text = R"({"model":"m","engines":[{"iid":"a","url":"http://127.0.0.1:1"}],)"
                           R"("x":)" +
                           EmptyObjects(kHostileObjects) + "}";
  const auto loaded = ParseFleetConfig(text);
  ASSERT_FALSE(loaded.ok());
  EXPECT_TRUE(absl::StrContains(loaded.status().message(), "would take more than"))
      << loaded.status().message();
}

TEST(JsonCostTest, DecodeChunkOfEmptyObjectsFailsAssembly) {
  router::Assembler assembler(engines::Api::kCompletions);
  const std::string chunk =
      R"({"choices":[{"index":0,"text":"a","logprobs":)" + EmptyObjects(kHostileObjects) + "}]}";
  EXPECT_FALSE(assembler.Add(chunk));
  EXPECT_TRUE(absl::StrContains(assembler.error(), "would take more than")) << assembler.error();
}

}  // namespace
}  // namespace narwhal::server
