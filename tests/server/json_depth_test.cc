// Every JSON input has a nesting bound (hardening): a deeply nested document
// from a client, an engine, a gRPC Struct or a config file gets a clear error
// and never reaches code that copies or prints it recursively (where it
// overflowed a thread's stack and killed the process).
#include <gtest/gtest.h>

#include <string>

#include "absl/strings/match.h"
#include "engines/engine_failure.h"
#include "engines/json_limits.h"
#include "router/assembler.h"
#include "server/config_loader.h"
#include "server/grpc_request.h"
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
  EXPECT_EQ(p.error.status, 400);
  EXPECT_TRUE(absl::StrContains(p.error.message, "nests deeper than 128 levels")) << p.error.message;
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
  EXPECT_TRUE(StructDepthWithin(lists, 4));   // {l:[[[ "leaf" ]]]}
  EXPECT_FALSE(StructDepthWithin(lists, 3));
}

TEST(JsonDepthTest, GrpcExtraTooDeepIs400) {
  narwhal::v1::GenerateRequest request;
  request.set_model("m");
  request.set_prompt("hi");
  *request.mutable_extra() = DeepStruct(5000);
  const GrpcParsedRequest out = TranslateGenerateRequest(request, true, "m");
  ASSERT_FALSE(out.parsed.ok);
  EXPECT_EQ(out.parsed.error.status, 400);
  EXPECT_EQ(out.parsed.error.param, "extra");
  EXPECT_TRUE(absl::StrContains(out.parsed.error.message, "nests deeper")) << out.parsed.error.message;

  *request.mutable_extra() = DeepStruct(20);
  EXPECT_TRUE(TranslateGenerateRequest(request, true, "m").parsed.ok);
}

TEST(JsonDepthTest, ConfigTooDeepIsAConfigError) {
  const std::string text = R"({"model":"m","engines":[{"iid":"a","url":"http://127.0.0.1:1"}],)"
                           R"("serving":{"max_attempts":)" + DeepArray(kHostileDepth) + "}}";
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
  const std::string chunk = R"({"choices":[{"index":0,"text":"a","logprobs":)" +
                            DeepArray(kHostileDepth) + "}]}";
  EXPECT_FALSE(assembler.Add(chunk));
  EXPECT_TRUE(absl::StrContains(assembler.error(), "nests deeper")) << assembler.error();
}

}  // namespace
}  // namespace narwhal::server
