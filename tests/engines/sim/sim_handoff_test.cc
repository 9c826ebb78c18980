// KV handoffs between real narwhal-sim processes: producer descriptors and
// leases, consumer pulls, and the failure behaviour vLLM's "fail" and
// "recompute" policies define.
#include <memory>
#include <regex>
#include <string>

#include "absl/time/clock.h"
#include "engines/sim/text_gen.h"
#include "gtest/gtest.h"
#include "tests/engines/sim/sim_test_util.h"

namespace narwhal::testing {
namespace {

using nlohmann::json;
using sim::GenerateText;

constexpr char kInternalErrorFrame[] =
    R"({"error": {"message": "Internal server error", "type": )"
    R"("InternalServerError", "param": null, "code": 500}})";

std::unique_ptr<SimProcess> StartSim(std::vector<std::string> args) {
  auto sim = SimProcess::Start(std::move(args));
  EXPECT_TRUE(sim.ok()) << sim.status();
  return sim.ok() ? *std::move(sim) : nullptr;
}

// Runs a prefill leg for `body` on `producer`; returns the descriptor.
json Prefill(SimProcess& producer, const std::string& path, const json& body,
             const std::string& request_id) {
  const JsonReply reply = PostJson(producer, path, PrefillBody(body),
                                   {{"X-Request-Id", request_id}});
  EXPECT_EQ(reply.status, 200) << reply.body;
  return reply.json.value("kv_transfer_params", json());
}

json DecodeBody(json body, const json& descriptor) {
  body["kv_transfer_params"] = descriptor;
  return body;
}

TEST(SimHandoffTest, ProducerDescriptorShapeAndLease) {
  auto producer = StartSim({"--engine-id", "p0", "--role", "prefill"});
  ASSERT_NE(producer, nullptr);
  const std::string prompt(100, 'w');  // 25 tokens -> 2 blocks
  const JsonReply reply =
      PostJson(*producer, "/v1/completions",
               PrefillBody(CompletionBody(prompt, 8, false)),
               {{"X-Request-Id", "pre-1"}});
  ASSERT_EQ(reply.status, 200) << reply.body;
  EXPECT_EQ(reply.json["id"], "cmpl-pre-1");
  EXPECT_EQ(reply.json["usage"]["completion_tokens"], 1);
  EXPECT_EQ(reply.json["choices"][0]["text"], GenerateText(prompt, 1));
  const json& d = reply.json["kv_transfer_params"];
  ASSERT_TRUE(d.is_object()) << reply.body;
  EXPECT_EQ(d["do_remote_prefill"], true);
  EXPECT_EQ(d["do_remote_decode"], false);
  EXPECT_EQ(d["remote_engine_id"], "p0");
  EXPECT_TRUE(std::regex_match(d["remote_request_id"].get<std::string>(),
                               std::regex("cmpl-pre-1-[0-9a-f]{8}")))
      << d["remote_request_id"];
  EXPECT_EQ(d["remote_host"], "127.0.0.1");
  EXPECT_EQ(d["remote_port"], producer->port());
  EXPECT_EQ(d["tp_size"], 1);
  EXPECT_EQ(d["dcp_size"], 1);
  EXPECT_EQ(d["pp_size"], 1);
  EXPECT_EQ(d["remote_num_tokens"], 25);
  EXPECT_TRUE(d["remote_blocks_expiry_time"].is_null());
  EXPECT_EQ(d["transfer_mode"], "pull");
  ASSERT_TRUE(d["remote_block_ids"].is_array());
  ASSERT_EQ(d["remote_block_ids"].size(), 1u);
  ASSERT_EQ(d["remote_block_ids"][0].size(), 2u);
  for (const json& id : d["remote_block_ids"][0]) {
    EXPECT_TRUE(id.is_number_integer());
    EXPECT_GE(id.get<int>(), 0);
  }

  absl::StatusOr<json> kv = producer->Kv();
  ASSERT_TRUE(kv.ok()) << kv.status();
  ASSERT_EQ((*kv)["held"].size(), 1u);
  const json& held = (*kv)["held"][0];
  EXPECT_EQ(held["remote_request_id"], d["remote_request_id"]);
  EXPECT_EQ(held["remote_block_ids"], d["remote_block_ids"]);
  EXPECT_NEAR(held["expires_at"].get<double>() - held["created_at"].get<double>(),
              30.0, 1e-6);

  // Chat producers name the handoff after chatcmpl-.
  const json chat = Prefill(*producer, "/v1/chat/completions",
                            ChatBody("hi", 4, false), "pre-2");
  EXPECT_EQ(chat["remote_request_id"].get<std::string>().rfind("chatcmpl-pre-2-", 0),
            0u);
}

TEST(SimHandoffTest, ConsumerPullsARealHandoff) {
  auto producer = StartSim({"--engine-id", "p0", "--role", "prefill"});
  auto consumer = StartSim({"--engine-id", "d0", "--role", "decode"});
  ASSERT_NE(producer, nullptr);
  ASSERT_NE(consumer, nullptr);
  json body = ChatBody("Capital of France?", 6, true);
  body["stream_options"] = {{"include_usage", true}};
  const json descriptor =
      Prefill(*producer, "/v1/chat/completions", body, "h-1");
  ASSERT_TRUE(descriptor.is_object());

  const HttpCapture capture = PostStream(
      *consumer, "/v1/chat/completions", DecodeBody(body, descriptor),
      WithRequestId("h-1"));
  ASSERT_EQ(capture.status, 200);
  EXPECT_EQ(StreamText(capture), GenerateText("Capital of France?", 6));
  EXPECT_TRUE(capture.saw_done());

  absl::StatusOr<json> kv = producer->Kv();
  ASSERT_TRUE(kv.ok());
  EXPECT_TRUE((*kv)["held"].empty());
  ASSERT_EQ((*kv)["consumed"].size(), 1u);
  const json& consumed = (*kv)["consumed"][0];
  EXPECT_EQ(consumed["remote_request_id"], descriptor["remote_request_id"]);
  EXPECT_EQ(consumed["consumer"]["engine_id"], "d0");
  EXPECT_EQ(consumed["consumer"]["request_id"], "chatcmpl-h-1");

  // The handoff serves one consumer: a second pull fails like vLLM's
  // kv_load_failure_policy "fail": 200, an in-stream 500 frame, [DONE].
  const HttpCapture again = PostStream(*consumer, "/v1/chat/completions",
                                       DecodeBody(body, descriptor));
  EXPECT_EQ(again.status, 200);
  ASSERT_EQ(again.events.size(), 2u) << again.body;
  EXPECT_EQ(again.events[0], kInternalErrorFrame);
  EXPECT_EQ(again.events[1], "[DONE]");
}

TEST(SimHandoffTest, ExpiredHandoffFailsTheDecode) {
  auto producer = StartSim({"--engine-id", "p0", "--kv-lease-s", "0.2"});
  auto consumer = StartSim({"--engine-id", "d0"});
  ASSERT_NE(producer, nullptr);
  ASSERT_NE(consumer, nullptr);
  const json body = CompletionBody("expiring", 4, true);
  const json first = Prefill(*producer, "/v1/completions", body, "e-1");
  const json second = Prefill(*producer, "/v1/completions", body, "e-2");
  // Wait (bounded) until the producer reports both expired.
  absl::StatusOr<json> kv;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  do {
    absl::SleepFor(absl::Milliseconds(50));
    kv = producer->Kv();
    ASSERT_TRUE(kv.ok());
  } while ((*kv)["expired"].size() < 2 && absl::Now() < deadline);
  ASSERT_EQ((*kv)["expired"].size(), 2u) << kv->dump();
  EXPECT_TRUE((*kv)["held"].empty());

  const HttpCapture stream =
      PostStream(*consumer, "/v1/completions", DecodeBody(body, first));
  EXPECT_EQ(stream.status, 200);
  ASSERT_EQ(stream.events.size(), 2u) << stream.body;
  EXPECT_EQ(stream.events[0], kInternalErrorFrame);
  EXPECT_EQ(stream.events[1], "[DONE]");

  json plain = DecodeBody(body, second);
  plain["stream"] = false;
  const JsonReply reply = PostJson(*consumer, "/v1/completions", plain,
                                   {{"X-Request-Id", "e-2d"}});
  EXPECT_EQ(reply.status, 500);
  EXPECT_EQ(reply.json["error"]["message"], "Internal server error");
  EXPECT_EQ(reply.json["error"]["type"], "InternalServerError");
  EXPECT_EQ(reply.json["error"]["code"], 500);
  std::optional<json> record = WaitForRecord(
      *consumer, "e-2d", [](const json& r) { return !r["end"].is_null(); });
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ((*record)["end"], "error");

  httplib::Client client(producer->host(), producer->port());
  httplib::Result metrics = client.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("vllm:nixl_num_kv_expired_reqs_total{engine=\"0\","
                               "model_name=\"Qwen/Qwen3-0.6B\"} 2.0"),
            std::string::npos)
      << metrics->body;
}

TEST(SimHandoffTest, UnknownOrForeignHandoffsFail) {
  auto producer = StartSim({"--engine-id", "p0"});
  auto consumer = StartSim({"--engine-id", "d0"});
  ASSERT_NE(producer, nullptr);
  ASSERT_NE(consumer, nullptr);
  const json body = CompletionBody("who?", 3, true);
  json descriptor = Prefill(*producer, "/v1/completions", body, "u-1");

  json unknown = descriptor;
  unknown["remote_request_id"] = "cmpl-never-12345678";
  HttpCapture capture =
      PostStream(*consumer, "/v1/completions", DecodeBody(body, unknown));
  ASSERT_EQ(capture.events.size(), 2u) << capture.body;
  EXPECT_EQ(capture.events[0], kInternalErrorFrame);

  json foreign = descriptor;
  foreign["remote_engine_id"] = "p9";
  capture = PostStream(*consumer, "/v1/completions", DecodeBody(body, foreign));
  ASSERT_EQ(capture.events.size(), 2u) << capture.body;
  EXPECT_EQ(capture.events[0], kInternalErrorFrame);

  json unreachable = descriptor;
  unreachable["remote_port"] = 1;  // nothing listens there
  capture = PostStream(*consumer, "/v1/completions", DecodeBody(body, unreachable));
  ASSERT_EQ(capture.events.size(), 2u) << capture.body;
  EXPECT_EQ(capture.events[0], kInternalErrorFrame);

  json mangled = descriptor;
  mangled["remote_block_ids"] = {{999999}};
  capture = PostStream(*consumer, "/v1/completions", DecodeBody(body, mangled));
  ASSERT_EQ(capture.events.size(), 2u) << capture.body;
  EXPECT_EQ(capture.events[0], kInternalErrorFrame);
}

TEST(SimHandoffTest, IncompleteParamsComputeLocally) {
  auto consumer = StartSim({"--engine-id", "d0"});
  ASSERT_NE(consumer, nullptr);
  const json body = CompletionBody("local", 4, true);
  const json params = {{"do_remote_prefill", true},
                       {"remote_request_id", "x"},
                       {"remote_block_ids", {{1}}}};
  const HttpCapture capture =
      PostStream(*consumer, "/v1/completions", DecodeBody(body, params));
  EXPECT_EQ(capture.status, 200);
  EXPECT_EQ(StreamText(capture), GenerateText("local", 4));
  EXPECT_TRUE(capture.saw_done());
}

TEST(SimHandoffTest, RecomputePolicyServesDespiteAFailedPull) {
  auto consumer = StartSim(
      {"--engine-id", "d0", "--kv-load-failure-policy", "recompute"});
  ASSERT_NE(consumer, nullptr);
  const json body = CompletionBody("recompute me", 4, true);
  const json params = {{"do_remote_prefill", true},
                       {"do_remote_decode", false},
                       {"remote_engine_id", "p0"},
                       {"remote_request_id", "cmpl-gone-00000000"},
                       {"remote_host", "127.0.0.1"},
                       {"remote_port", 1},
                       {"remote_block_ids", {{1, 2}}}};
  const HttpCapture capture =
      PostStream(*consumer, "/v1/completions", DecodeBody(body, params));
  EXPECT_EQ(capture.status, 200);
  EXPECT_EQ(StreamText(capture), GenerateText("recompute me", 4));
  EXPECT_TRUE(capture.saw_done());
}

TEST(SimHandoffTest, PullEndpointAnswers) {
  auto producer = StartSim({"--engine-id", "p0"});
  ASSERT_NE(producer, nullptr);
  const json descriptor = Prefill(
      *producer, "/v1/completions", CompletionBody("pull", 3, false), "pull-1");
  const json pull = {{"remote_engine_id", "p0"},
                     {"remote_request_id", descriptor["remote_request_id"]}};
  JsonReply reply = PostJson(*producer, "/sim/kv/pull", pull);
  EXPECT_EQ(reply.status, 200) << reply.body;
  EXPECT_EQ(reply.json["remote_block_ids"], descriptor["remote_block_ids"]);
  EXPECT_EQ(PostJson(*producer, "/sim/kv/pull", pull).status, 409);
  json other = pull;
  other["remote_engine_id"] = "p1";
  EXPECT_EQ(PostJson(*producer, "/sim/kv/pull", other).status, 404);
  other = pull;
  other["remote_request_id"] = "nope";
  EXPECT_EQ(PostJson(*producer, "/sim/kv/pull", other).status, 404);
}

}  // namespace
}  // namespace narwhal::testing
