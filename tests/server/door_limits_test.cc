// Both doors on one router: the request limits of the `limits` section, the
// gRPC door's finite-number rule and the client API key give the same
// refusals over HTTP and gRPC — 400 / INVALID_ARGUMENT (401 /
// UNAUTHENTICATED for the key), a journal row, and nothing sent to an
// engine.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "tests/server/both_doors_harness.h"

namespace narwhal::server::http_door_test {
namespace {

class DoorLimitsTest : public BothDoorsTest {
 protected:
  void StartBoth(const std::string& api_key = "") {
    settings_.limits.max_tokens = 64;
    settings_.limits.max_messages = 2;
    settings_.limits.max_prompts = 2;
    BothDoorsTest::StartBoth(api_key);
  }

  // An HTTP refusal: status, param, message, and its journal row (the last).
  void ExpectHttpRefused(const std::string& path, const json& body, int status,
                         const std::string& param, const std::string& message,
                         const std::string& extra_headers = "") {
    SCOPED_TRACE(body.dump().substr(0, 200));
    auto r = Exchange(Post(path, body.dump(), extra_headers));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, status);
    const json error = json::parse(r->body, nullptr, false)["error"];
    EXPECT_EQ(error["code"], status);
    if (!param.empty()) {
      EXPECT_EQ(error["param"], param);
    }
    EXPECT_EQ(error["message"], message);
    const std::vector<json> rows = JournalRows();
    ASSERT_FALSE(rows.empty());
    EXPECT_EQ(rows.back()["door"], "http");
    EXPECT_EQ(rows.back()["terminal"], status == 401 ? "rejected" : "invalid");
    EXPECT_EQ(rows.back()["status"], status);
    EXPECT_EQ(rows.back()["reason"], status == 401 ? "unauthorized" : "invalid_request");
  }

  void ExpectGrpcRefused(const grpc::Status& s, grpc::StatusCode code, int http_status,
                         const std::string& message) {
    EXPECT_EQ(s.error_code(), code) << s.error_message();
    EXPECT_EQ(s.error_message(), message);
    EXPECT_EQ(Info(s).http_status(), http_status);
    const std::vector<json> rows = JournalRows();
    ASSERT_FALSE(rows.empty());
    EXPECT_EQ(rows.back()["door"], "grpc");
    EXPECT_EQ(rows.back()["terminal"], http_status == 401 ? "rejected" : "invalid");
    EXPECT_EQ(rows.back()["status"], http_status);
  }

  static pb::GenerateRequest GrpcPrompt() {
    pb::GenerateRequest r;
    r.set_model("m");
    r.set_prompt("hi");
    r.set_max_tokens(4);
    return r;
  }
};

TEST_F(DoorLimitsTest, MaxTokensOverTheLimitIsRefusedOnBothDoors) {
  StartBoth();
  const json over = {{"model", "m"}, {"prompt", "hi"}, {"max_tokens", 65}};
  ExpectHttpRefused("/v1/completions", over, 400, "max_tokens",
                    "max_tokens must be at most 64 (got 65)");
  json huge = over;
  huge["max_tokens"] = 9223372036854775808ull;  // past INT64_MAX
  ExpectHttpRefused("/v1/completions", huge, 400, "max_tokens",
                    "max_tokens must be at most 64 (got 9223372036854775808)");
  const json chat = {{"model", "m"},
                     {"messages", {{{"role", "user"}, {"content", "hi"}}}},
                     {"max_completion_tokens", 1.5}};
  ExpectHttpRefused("/v1/chat/completions", chat, 400, "max_completion_tokens",
                    "max_completion_tokens must be an integer (got 1.5)");

  pb::GenerateRequest r = GrpcPrompt();
  r.set_max_tokens(65);
  ExpectGrpcRefused(Complete(r), grpc::StatusCode::INVALID_ARGUMENT, 400,
                    "max_tokens must be at most 64 (got 65)");
  EXPECT_TRUE(fake_.prefill_calls().empty());
}

TEST_F(DoorLimitsTest, TooManyMessagesOrPromptsAreRefusedOnBothDoors) {
  StartBoth();
  const json message = {{"role", "user"}, {"content", "hi"}};
  ExpectHttpRefused("/v1/chat/completions",
                    {{"model", "m"}, {"messages", {message, message, message}}}, 400, "messages",
                    "messages must have at most 2 entries (got 3)");
  ExpectHttpRefused("/v1/completions", {{"model", "m"}, {"prompt", {"a", "b", "c"}}}, 400, "prompt",
                    "prompt must hold at most 2 prompts (got 3)");

  pb::GenerateRequest chat;
  chat.set_model("m");
  for (int i = 0; i < 3; ++i) {
    auto* m = chat.mutable_messages()->add_messages();
    m->set_role("user");
    m->set_content("hi");
  }
  ExpectGrpcRefused(Complete(chat), grpc::StatusCode::INVALID_ARGUMENT, 400,
                    "messages must have at most 2 entries (got 3)");
  EXPECT_TRUE(fake_.prefill_calls().empty());
}

TEST_F(DoorLimitsTest, NonFiniteNumberOnTheGrpcDoorIsInvalidArgument) {
  StartBoth();
  pb::GenerateRequest r = GrpcPrompt();
  (*r.mutable_extra()->mutable_fields())["logprobs"].set_number_value(std::nan(""));
  ExpectGrpcRefused(Complete(r), grpc::StatusCode::INVALID_ARGUMENT, 400,
                    "extra.logprobs must be a finite number");
  r.clear_extra();
  r.set_top_p(INFINITY);
  ExpectGrpcRefused(Complete(r), grpc::StatusCode::INVALID_ARGUMENT, 400,
                    "top_p must be a finite number");
  EXPECT_TRUE(fake_.prefill_calls().empty());
}

TEST_F(DoorLimitsTest, ApiKeyMustMatchExactlyOnBothDoors) {
  StartBoth("s3cret-key");
  const json body = {{"model", "m"}, {"prompt", "hi"}, {"max_tokens", 4}};
  for (const std::string& wrong :
       {std::string("Bearer x3cret-key"), std::string("Bearer s3cret-kez"),
        std::string("Bearer s3cret-ke"), std::string("Bearer s3cret-key2"), std::string("Bearer "),
        std::string("s3cret-key"), std::string("Bearer  s3cret-key")}) {
    SCOPED_TRACE(wrong);
    ExpectHttpRefused("/v1/completions", body, 401, "", "invalid or missing API key",
                      "Authorization: " + wrong + "\r\n");
    ExpectGrpcRefused(Complete(GrpcPrompt(), wrong), grpc::StatusCode::UNAUTHENTICATED, 401,
                      "invalid or missing API key");
  }
  EXPECT_TRUE(fake_.prefill_calls().empty());

  fake_.QueuePrefill(nt::PrefillStep::Ok());
  fake_.QueueDecode(nt::DecodeStep::Stream({nt::CompletionChunk(" a", "stop")}));
  auto r = Exchange(Post("/v1/completions", body.dump(), "Authorization: Bearer s3cret-key\r\n"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  fake_.QueuePrefill(nt::PrefillStep::Ok());
  fake_.QueueDecode(nt::DecodeStep::Stream({nt::CompletionChunk(" a", "stop")}));
  const grpc::Status ok = Complete(GrpcPrompt(), "Bearer s3cret-key");
  EXPECT_TRUE(ok.ok()) << ok.error_message();
}

// One rule on both doors: spaces around the value are not part of it. The
// HTTP parser drops them; gRPC metadata keeps them, and they used to make
// the same key a 401 there only.
TEST_F(DoorLimitsTest, ApiKeyWithSurroundingSpacesIsTheSameKeyOnBothDoors) {
  StartBoth("s3cret-key");
  const json body = {{"model", "m"}, {"prompt", "hi"}, {"max_tokens", 4}};
  for (const std::string& padded :
       {std::string("Bearer s3cret-key "), std::string(" Bearer s3cret-key  ")}) {
    SCOPED_TRACE("[" + padded + "]");
    fake_.QueuePrefill(nt::PrefillStep::Ok());
    fake_.QueueDecode(nt::DecodeStep::Stream({nt::CompletionChunk(" a", "stop")}));
    auto r = Exchange(Post("/v1/completions", body.dump(), "Authorization: " + padded + "\r\n"));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
    fake_.QueuePrefill(nt::PrefillStep::Ok());
    fake_.QueueDecode(nt::DecodeStep::Stream({nt::CompletionChunk(" a", "stop")}));
    const grpc::Status ok = Complete(GrpcPrompt(), padded);
    EXPECT_TRUE(ok.ok()) << ok.error_message();
  }
}

}  // namespace
}  // namespace narwhal::server::http_door_test
