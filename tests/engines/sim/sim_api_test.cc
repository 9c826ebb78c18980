// The OpenAI/vLLM surface of a real narwhal-sim process.
#include <cstdlib>
#include <memory>
#include <string>

#include "engines/sim/text_gen.h"
#include "gtest/gtest.h"
#include "tests/engines/sim/sim_test_util.h"

namespace narwhal::testing {
namespace {

using nlohmann::json;
using sim::GenerateText;

class SimApiTest : public OneSimTest<SimApiTest> {
 public:
  static constexpr char kEngineId[] = "api0";
};

httplib::Result Get(const SimProcess& sim, const std::string& path) {
  httplib::Client client(sim.host(), sim.port());
  client.set_read_timeout(std::chrono::seconds(5));
  return client.Get(path);
}

TEST_F(SimApiTest, HealthVersionModelsMetrics) {
  httplib::Result health = Get(*sim_, "/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(health->body, "");
  httplib::Client client(sim_->host(), sim_->port());
  httplib::Result ping = client.Post("/ping", "", "text/plain");
  ASSERT_TRUE(ping);
  EXPECT_EQ(ping->status, 200);

  httplib::Result version = Get(*sim_, "/version");
  ASSERT_TRUE(version);
  EXPECT_EQ(version->body, R"({"version":"0.29.1"})");

  httplib::Result models = Get(*sim_, "/v1/models");
  ASSERT_TRUE(models);
  const json list = json::parse(models->body);
  EXPECT_EQ(list["object"], "list");
  ASSERT_EQ(list["data"].size(), 1u);
  EXPECT_EQ(list["data"][0]["id"], kSimModel);
  EXPECT_EQ(list["data"][0]["owned_by"], "vllm");
  EXPECT_EQ(list["data"][0]["max_model_len"], 32768);
  EXPECT_TRUE(list["data"][0]["parent"].is_null());

  httplib::Result metrics = Get(*sim_, "/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("vllm:num_requests_running{engine=\"0\","
                               "model_name=\"Qwen/Qwen3-0.6B\"} 0.0"),
            std::string::npos)
      << metrics->body;
  EXPECT_NE(metrics->body.find("vllm:num_requests_waiting"), std::string::npos);
  EXPECT_NE(metrics->body.find("vllm:nixl_num_kv_expired_reqs_total"), std::string::npos);
}

TEST_F(SimApiTest, InfoDescribesTheEngine) {
  absl::StatusOr<json> info = sim_->Info();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ((*info)["engine_id"], "api0");
  EXPECT_EQ((*info)["port"], sim_->port());
  EXPECT_EQ((*info)["role"], "both");
  EXPECT_EQ((*info)["version"], "0.29.1");
  EXPECT_EQ((*info)["model"], kSimModel);
}

TEST_F(SimApiTest, NonStreamingCompletion) {
  const JsonReply reply =
      PostJson(*sim_, "/v1/completions", CompletionBody("The quick brown fox", 6, false),
               {{"X-Request-Id", "req-1"}});
  ASSERT_EQ(reply.status, 200) << reply.body;
  const json& body = reply.json;
  EXPECT_EQ(body["id"], "cmpl-req-1");
  EXPECT_EQ(body["object"], "text_completion");
  EXPECT_EQ(body["model"], kSimModel);
  EXPECT_EQ(body["choices"][0]["text"], GenerateText("The quick brown fox", 6));
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(body["usage"]["prompt_tokens"], 5);  // ceil(19 / 4)
  EXPECT_EQ(body["usage"]["completion_tokens"], 6);
  EXPECT_EQ(body["usage"]["total_tokens"], 11);
  EXPECT_TRUE(body["kv_transfer_params"].is_null());
  absl::StatusOr<json> info = sim_->Info();
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(body["system_fingerprint"], (*info)["system_fingerprint"]);
  auto echoed = reply.headers.find("X-Request-Id");
  ASSERT_NE(echoed, reply.headers.end());
  EXPECT_EQ(echoed->second, "req-1");
}

TEST_F(SimApiTest, NonStreamingChatDefaultsToSixteenTokens) {
  json body = ChatBody("Capital of France?", 1, false);
  body.erase("max_tokens");
  const JsonReply reply = PostJson(*sim_, "/v1/chat/completions", body);
  ASSERT_EQ(reply.status, 200) << reply.body;
  EXPECT_EQ(reply.json["object"], "chat.completion");
  EXPECT_EQ(reply.json["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(reply.json["choices"][0]["message"]["content"], GenerateText("Capital of France?", 16));
  EXPECT_EQ(reply.json["usage"]["completion_tokens"], 16);
  EXPECT_EQ(reply.json["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
}

TEST_F(SimApiTest, StreamingCompletionMatchesTheGenerator) {
  HttpCaptureOptions options;
  options.headers = {{"X-Request-Id", "s-1"}};
  const HttpCapture capture =
      PostStream(*sim_, "/v1/completions", CompletionBody("stream me", 5, true), options);
  ASSERT_EQ(capture.error, httplib::Error::Success);
  ASSERT_EQ(capture.status, 200);
  auto type = capture.headers.find("Content-Type");
  ASSERT_NE(type, capture.headers.end());
  EXPECT_EQ(type->second, "text/event-stream; charset=utf-8");
  const std::vector<json> events = JsonEvents(capture);
  ASSERT_EQ(events.size(), 5u);  // one token per event, no usage chunk
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i]["id"], "cmpl-s-1");
    EXPECT_EQ(events[i]["object"], "text_completion");
    EXPECT_EQ(events[i]["choices"][0]["text"], sim::GenerateToken("stream me", i));
    EXPECT_EQ(events[i]["choices"][0]["finish_reason"].is_null(), i < 4);
  }
  EXPECT_EQ(events[4]["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(events[4].contains("system_fingerprint"));
  EXPECT_EQ(StreamText(capture), GenerateText("stream me", 5));
  ASSERT_FALSE(capture.events.empty());
  EXPECT_EQ(capture.events.back(), "[DONE]");
  // Every event is framed exactly "data: <json>\n\n".
  EXPECT_EQ(capture.body.rfind("data: [DONE]\n\n"),
            capture.body.size() - std::string("data: [DONE]\n\n").size());
}

TEST_F(SimApiTest, StreamingChatWithUsage) {
  json body = ChatBody("hello", 3, true);
  body["stream_options"] = json::object();  // include_usage defaults to true
  const HttpCapture capture = PostStream(*sim_, "/v1/chat/completions", body);
  ASSERT_EQ(capture.status, 200);
  const std::vector<json> events = JsonEvents(capture);
  ASSERT_EQ(events.size(), 5u);  // role, 3 tokens, usage
  EXPECT_EQ(events[0]["choices"][0]["delta"], json({{"role", "assistant"}, {"content", ""}}));
  EXPECT_EQ(events[0]["object"], "chat.completion.chunk");
  EXPECT_EQ(events[3]["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(events[4]["choices"].empty());
  EXPECT_EQ(events[4]["usage"],
            json({{"prompt_tokens", 2}, {"total_tokens", 5}, {"completion_tokens", 3}}));
  EXPECT_EQ(StreamText(capture), GenerateText("hello", 3));
  EXPECT_EQ(StreamText(capture), " a beyond shore");
  EXPECT_TRUE(capture.saw_done());
}

TEST_F(SimApiTest, StreamAndBodyAgree) {
  const JsonReply full = PostJson(*sim_, "/v1/chat/completions", ChatBody("agree?", 9, false));
  const HttpCapture stream = PostStream(*sim_, "/v1/chat/completions", ChatBody("agree?", 9, true));
  ASSERT_EQ(full.status, 200);
  EXPECT_EQ(full.json["choices"][0]["message"]["content"], StreamText(stream));
}

TEST_F(SimApiTest, WrongModelIsNotFound) {
  json body = CompletionBody("x", 2, true);
  body["model"] = "nope";
  const JsonReply reply = PostJson(*sim_, "/v1/completions", body);
  EXPECT_EQ(reply.status, 404);
  EXPECT_EQ(reply.body, R"({"error":{"message":"The model `nope` does not exist.",)"
                        R"("type":"NotFoundError","param":"model","code":404}})");
}

TEST_F(SimApiTest, ValidationErrorsAre400) {
  httplib::Client client(sim_->host(), sim_->port());
  httplib::Result wrong_type = client.Post("/v1/completions", R"({"prompt":"x"})", "text/plain");
  ASSERT_TRUE(wrong_type);
  EXPECT_EQ(wrong_type->status, 400);
  httplib::Result bad_json = client.Post("/v1/completions", "{nope", "application/json");
  ASSERT_TRUE(bad_json);
  EXPECT_EQ(bad_json->status, 400);
  const json error = json::parse(bad_json->body);
  EXPECT_EQ(error["error"]["code"], 400);
  EXPECT_TRUE(error["error"]["param"].is_null());

  EXPECT_EQ(PostJson(*sim_, "/v1/completions", {{"model", kSimModel}}).status, 400);
  EXPECT_EQ(PostJson(*sim_, "/v1/chat/completions", {{"model", kSimModel}}).status, 400);
  json options = CompletionBody("x", 2, false);
  options["stream_options"] = {{"include_usage", true}};
  JsonReply reply = PostJson(*sim_, "/v1/completions", options);
  EXPECT_EQ(reply.status, 400);
  EXPECT_EQ(reply.json["error"]["message"],
            "Stream options can only be defined when `stream=True`.");
  json min_tokens = CompletionBody("x", 2, false);
  min_tokens["min_tokens"] = 3;
  EXPECT_EQ(PostJson(*sim_, "/v1/completions", min_tokens).status, 400);
  const JsonReply long_prompt =
      PostJson(*sim_, "/v1/completions", CompletionBody(std::string(200000, 'a'), 2, false));
  EXPECT_EQ(long_prompt.status, 400);
  EXPECT_EQ(long_prompt.json["error"]["type"], "BadRequestError");
  json producer_stream = PrefillBody(CompletionBody("x", 2, false));
  producer_stream["stream"] = true;
  reply = PostJson(*sim_, "/v1/completions", producer_stream);
  EXPECT_EQ(reply.status, 400);
  EXPECT_EQ(reply.json["error"]["message"],
            "KV-transfer producer requests are not supported with streaming");
}

TEST_F(SimApiTest, SurvivesDeeplyNestedBodies) {
  const std::string nest(100000, '[');
  const std::string unnest(100000, ']');
  httplib::Client client(sim_->host(), sim_->port());
  httplib::Result result =
      client.Post("/v1/completions",
                  R"({"prompt":"x","kv_transfer_params":{"do_remote_prefill":true,)"
                  R"("remote_block_ids":)" +
                      nest + unnest + "}}",
                  "application/json");
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, 400);
  httplib::Result faults = client.Post("/sim/faults", nest + unnest, "application/json");
  ASSERT_TRUE(faults);
  EXPECT_EQ(faults->status, 400);
  // The records (raw text kept) still serialize.
  absl::StatusOr<json> records = sim_->Requests();
  ASSERT_TRUE(records.ok()) << records.status();
  ASSERT_FALSE(records->empty());
  EXPECT_TRUE(records->back()["body"].is_string());
  httplib::Result health = client.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
}

TEST_F(SimApiTest, RecordsRequests) {
  const json body = CompletionBody("record me", 3, true);
  const HttpCapture capture = PostStream(*sim_, "/v1/completions", body, WithRequestId("rec-1"));
  ASSERT_TRUE(capture.saw_done());
  std::optional<json> record =
      WaitForRecord(*sim_, "rec-1", [](const json& r) { return !r["end"].is_null(); });
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ((*record)["method"], "POST");
  EXPECT_EQ((*record)["path"], "/v1/completions");
  EXPECT_EQ((*record)["phase"], "decode");
  EXPECT_EQ((*record)["body"], body);
  EXPECT_EQ((*record)["body_truncated"], false);
  EXPECT_EQ((*record)["status"], 200);
  EXPECT_EQ((*record)["end"], "complete");
  EXPECT_EQ((*record)["tokens_sent"], 3);
  EXPECT_TRUE((*record)["fault"].is_null());
  EXPECT_GE((*record)["ended_at"].get<double>(), (*record)["at"].get<double>());
  EXPECT_EQ((*record)["headers"]["content-type"], "application/json");

  ASSERT_TRUE(sim_->ClearRequests().ok());
  absl::StatusOr<json> records = sim_->Requests();
  ASSERT_TRUE(records.ok());
  EXPECT_TRUE(records->empty());
}

TEST_F(SimApiTest, LargeBodiesAreNotKept) {
  const json body = CompletionBody(std::string(300 << 10, 'a'), 1, false);
  PostJson(*sim_, "/v1/completions", body, {{"X-Request-Id", "big-1"}});
  std::optional<json> record =
      WaitForRecord(*sim_, "big-1", [](const json& r) { return !r["end"].is_null(); });
  ASSERT_TRUE(record.has_value());
  EXPECT_TRUE((*record)["body"].is_null());
  EXPECT_EQ((*record)["body_truncated"], true);
  EXPECT_EQ((*record)["body_bytes"], body.dump().size());
}

TEST_F(SimApiTest, ValidationFailuresAreRecordedAsErrors) {
  json body = CompletionBody("x", 2, false);
  body["model"] = "other";
  PostJson(*sim_, "/v1/completions", body, {{"X-Request-Id", "bad-1"}});
  std::optional<json> record =
      WaitForRecord(*sim_, "bad-1", [](const json& r) { return !r["end"].is_null(); });
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ((*record)["status"], 404);
  EXPECT_EQ((*record)["end"], "error");
}

TEST_F(SimApiTest, ClientDisconnectEndsTheStream) {
  json body = CompletionBody("a long one", 2000, true);
  HttpCaptureOptions options;
  options.headers = {{"X-Request-Id", "gone-1"}};
  options.hang_up = [](const HttpCapture& c) { return c.events.size() >= 3; };
  const HttpCapture capture = PostStream(*sim_, "/v1/completions", body, options);
  EXPECT_EQ(capture.error, httplib::Error::Canceled);
  std::optional<json> record =
      WaitForRecord(*sim_, "gone-1", [](const json& r) { return !r["end"].is_null(); });
  ASSERT_TRUE(record.has_value()) << "the stream did not end";
  EXPECT_EQ((*record)["end"], "client_gone");
  EXPECT_LT((*record)["tokens_sent"].get<int>(), 2000);
  // 2000 tokens take 10 s at the default 5 ms interval.
  EXPECT_LT((*record)["ended_at"].get<double>() - (*record)["at"].get<double>(), 5.0);
}

TEST(SimApiKeyTest, GuardsOnlyV1) {
  setenv("NARWHAL_SIM_TEST_KEY", "k3y", 1);
  auto sim = SimProcess::Start({"--api-key-env", "NARWHAL_SIM_TEST_KEY"});
  ASSERT_TRUE(sim.ok()) << sim.status();
  const JsonReply denied = PostJson(**sim, "/v1/completions", CompletionBody("x", 1, false));
  EXPECT_EQ(denied.status, 401);
  EXPECT_EQ(denied.body, R"({"error":"Unauthorized"})");
  const JsonReply wrong = PostJson(**sim, "/v1/completions", CompletionBody("x", 1, false),
                                   {{"Authorization", "Bearer nope"}});
  EXPECT_EQ(wrong.status, 401);
  const JsonReply allowed = PostJson(**sim, "/v1/completions", CompletionBody("x", 1, false),
                                     {{"Authorization", "Bearer k3y"}});
  EXPECT_EQ(allowed.status, 200);
  httplib::Result health = Get(**sim, "/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  // The recorded header hides the credential.
  absl::StatusOr<json> records = (*sim)->Requests();
  ASSERT_TRUE(records.ok());
  bool seen = false;
  for (const json& record : *records) {
    if (record["headers"].contains("authorization")) {
      EXPECT_EQ(record["headers"]["authorization"].get<std::string>().find("k3y"),
                std::string::npos);
      seen = true;
    }
  }
  EXPECT_TRUE(seen);
}

}  // namespace
}  // namespace narwhal::testing
