// The observable wire behaviour of every fault kind of a real narwhal-sim.
#include <memory>
#include <string>

#include "absl/time/clock.h"
#include "engines/sim/text_gen.h"
#include "gtest/gtest.h"
#include "tests/engines/sim/sim_test_util.h"

namespace narwhal::testing {
namespace {

using nlohmann::json;
using sim::GenerateText;

class SimFaultsTest : public OneSimTest<SimFaultsTest> {
 public:
  static constexpr char kEngineId[] = "f0";

 protected:
  void SetFault(const json& rule) { ASSERT_TRUE(sim_->SetFaults(json{{"faults", {rule}}}).ok()); }

  // The finished record of the request sent with this X-Request-Id.
  json EndedRecord(const std::string& id) {
    std::optional<json> record =
        WaitForRecord(*sim_, id, [](const json& r) { return !r["end"].is_null(); });
    EXPECT_TRUE(record.has_value()) << id << " never ended";
    return record.value_or(json::object());
  }

  HttpCapture Stream(const std::string& path, const json& body, const std::string& id,
                     absl::Duration read_timeout = absl::Seconds(10)) {
    HttpCaptureOptions options;
    options.headers = {{"X-Request-Id", id}};
    options.read_timeout = read_timeout;
    return PostStream(*sim_, path, body, options);
  }
};

TEST_F(SimFaultsTest, DropConnection) {
  SetFault({{"kind", "drop_connection"}});
  const HttpCapture capture = Stream("/v1/completions", CompletionBody("x", 3, true), "drop-1");
  EXPECT_NE(capture.error, httplib::Error::Success);
  EXPECT_EQ(capture.status, 0);
  EXPECT_TRUE(capture.body.empty());
  const json record = EndedRecord("drop-1");
  EXPECT_EQ(record["fault"], "drop_connection");
  EXPECT_EQ(record["end"], "fault");
  // The rule fired once: the next request is served.
  const HttpCapture next = Stream("/v1/completions", CompletionBody("x", 3, true), "drop-2");
  EXPECT_TRUE(next.saw_done());
}

TEST_F(SimFaultsTest, DelayHeaders) {
  SetFault({{"kind", "delay_headers"}, {"ms", 400}});
  const HttpCapture capture = Stream("/v1/completions", CompletionBody("late", 2, true), "delay-1");
  EXPECT_EQ(capture.status, 200);
  EXPECT_GE(capture.time_to_headers, absl::Milliseconds(400));
  EXPECT_EQ(StreamText(capture), GenerateText("late", 2));
  EXPECT_EQ(EndedRecord("delay-1")["end"], "complete");
}

TEST_F(SimFaultsTest, HttpStatus) {
  SetFault({{"kind", "http_status"}, {"status", 503}, {"message", "engine busy"}});
  const JsonReply reply =
      PostJson(*sim_, "/v1/chat/completions", ChatBody("x", 2, true), {{"X-Request-Id", "st-1"}});
  EXPECT_EQ(reply.status, 503);
  EXPECT_EQ(reply.json["error"]["message"], "engine busy");
  EXPECT_EQ(reply.json["error"]["type"], "Service Unavailable");
  EXPECT_EQ(reply.json["error"]["code"], 503);
  const json record = EndedRecord("st-1");
  EXPECT_EQ(record["status"], 503);
  EXPECT_EQ(record["fault"], "http_status");
}

TEST_F(SimFaultsTest, SilentBeforeFirstTokenStream) {
  SetFault({{"kind", "silent_before_first_token"}});
  const HttpCapture capture =
      Stream("/v1/chat/completions", ChatBody("x", 3, true), "silent-1", absl::Milliseconds(500));
  // Headers arrive at once, then nothing until the client gives up.
  EXPECT_EQ(capture.status, 200);
  EXPECT_LT(capture.time_to_headers, absl::Milliseconds(400));
  EXPECT_TRUE(capture.body.empty());
  EXPECT_EQ(capture.error, httplib::Error::Read);
  // The engine noticed the client leaving promptly (not after 300 s).
  const json record = EndedRecord("silent-1");
  EXPECT_EQ(record["fault"], "silent_before_first_token");
  EXPECT_EQ(record["end"], "client_gone");
  EXPECT_EQ(record["tokens_sent"], 0);
  const double held = record["ended_at"].get<double>() - record["at"].get<double>();
  EXPECT_GE(held, 0.45);
  EXPECT_LT(held, 3.0);
}

TEST_F(SimFaultsTest, SilentPrefillSendsNoResponse) {
  SetFault({{"kind", "silent_before_first_token"}, {"phase", "prefill"}});
  // A decode request is not affected by a prefill rule.
  const JsonReply decode = PostJson(*sim_, "/v1/completions", CompletionBody("x", 2, false));
  EXPECT_EQ(decode.status, 200);
  const JsonReply prefill =
      PostJson(*sim_, "/v1/completions", PrefillBody(CompletionBody("x", 2, false)),
               {{"X-Request-Id", "sp-1"}}, absl::Milliseconds(500));
  EXPECT_EQ(prefill.status, 0);
  const json record = EndedRecord("sp-1");
  EXPECT_EQ(record["phase"], "prefill");
  EXPECT_EQ(record["end"], "client_gone");
}

TEST_F(SimFaultsTest, MetadataThenSilence) {
  SetFault({{"kind", "metadata_then_silence"}, {"chunks", 2}});
  const HttpCapture chat =
      Stream("/v1/chat/completions", ChatBody("x", 3, true), "meta-1", absl::Milliseconds(500));
  EXPECT_EQ(chat.status, 200);
  EXPECT_EQ(chat.error, httplib::Error::Read);
  const std::vector<json> events = JsonEvents(chat);
  ASSERT_EQ(events.size(), 2u) << chat.body;
  for (const json& event : events) {
    EXPECT_EQ(event["choices"][0]["delta"], json({{"role", "assistant"}, {"content", ""}}));
  }
  EXPECT_EQ(StreamText(chat), "");

  SetFault({{"kind", "metadata_then_silence"}});
  const HttpCapture completion =
      Stream("/v1/completions", CompletionBody("x", 3, true), "meta-2", absl::Milliseconds(500));
  ASSERT_EQ(completion.events.size(), 1u);
  EXPECT_EQ(JsonEvents(completion)[0]["choices"][0]["text"], "");
  EXPECT_EQ(EndedRecord("meta-2")["end"], "client_gone");
}

TEST_F(SimFaultsTest, StallAfterTokens) {
  SetFault({{"kind", "stall_after_tokens"}, {"tokens", 3}});
  const HttpCapture capture = Stream("/v1/chat/completions", ChatBody("stall", 10, true), "stall-1",
                                     absl::Milliseconds(500));
  EXPECT_EQ(capture.error, httplib::Error::Read);
  EXPECT_EQ(StreamText(capture), GenerateText("stall", 3));
  EXPECT_FALSE(capture.saw_done());
  const json record = EndedRecord("stall-1");
  EXPECT_EQ(record["tokens_sent"], 3);
  EXPECT_EQ(record["end"], "client_gone");
}

TEST_F(SimFaultsTest, CloseBeforeDone) {
  SetFault({{"kind", "close_before_done"}, {"tokens", 2}});
  const HttpCapture capture =
      Stream("/v1/completions", CompletionBody("close", 10, true), "close-1");
  // A well-formed chunked body that simply ends: no transport error.
  EXPECT_EQ(capture.error, httplib::Error::Success);
  EXPECT_EQ(capture.status, 200);
  EXPECT_EQ(StreamText(capture), GenerateText("close", 2));
  EXPECT_FALSE(capture.saw_done());
  EXPECT_EQ(EndedRecord("close-1")["end"], "fault");
}

TEST_F(SimFaultsTest, CloseBeforeDoneDropsANonStreamingRequest) {
  SetFault({{"kind", "close_before_done"}});
  const JsonReply reply =
      PostJson(*sim_, "/v1/completions", PrefillBody(CompletionBody("x", 2, false)));
  EXPECT_EQ(reply.status, 0);
}

TEST_F(SimFaultsTest, DoneBeforeToken) {
  SetFault({{"kind", "done_before_token"}, {"times", 2}});
  const HttpCapture chat = Stream("/v1/chat/completions", ChatBody("x", 3, true), "dbt-1");
  ASSERT_EQ(chat.events.size(), 2u) << chat.body;
  EXPECT_EQ(json::parse(chat.events[0])["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(chat.events[1], "[DONE]");
  const HttpCapture completion = Stream("/v1/completions", CompletionBody("x", 3, true), "dbt-2");
  ASSERT_EQ(completion.events.size(), 1u) << completion.body;
  EXPECT_EQ(completion.events[0], "[DONE]");
  EXPECT_EQ(EndedRecord("dbt-2")["end"], "fault");
}

TEST_F(SimFaultsTest, ErrorInStream) {
  SetFault(
      {{"kind", "error_in_stream"}, {"after_tokens", 2}, {"code", 503}, {"message", "overloaded"}});
  const HttpCapture capture = Stream("/v1/completions", CompletionBody("err", 5, true), "eis-1");
  EXPECT_EQ(capture.status, 200);
  ASSERT_EQ(capture.events.size(), 4u) << capture.body;
  EXPECT_EQ(StreamText(capture), GenerateText("err", 2));
  EXPECT_EQ(capture.events[2],
            R"({"error": {"message": "overloaded", "type": "Service Unavailable", )"
            R"("param": null, "code": 503}})");
  EXPECT_EQ(capture.events[3], "[DONE]");

  SetFault({{"kind", "error_in_stream"}});
  const JsonReply reply = PostJson(*sim_, "/v1/completions", CompletionBody("err", 5, false));
  EXPECT_EQ(reply.status, 500);
  EXPECT_EQ(reply.json["error"]["message"], "Internal server error");
}

TEST_F(SimFaultsTest, DescriptorFaults) {
  const json body = PrefillBody(CompletionBody("desc", 4, false));
  SetFault({{"kind", "no_descriptor"}});
  JsonReply reply = PostJson(*sim_, "/v1/completions", body);
  ASSERT_EQ(reply.status, 200);
  ASSERT_TRUE(reply.json.contains("kv_transfer_params"));
  EXPECT_TRUE(reply.json["kv_transfer_params"].is_null());

  SetFault({{"kind", "descriptor_without_engine_id"}});
  reply = PostJson(*sim_, "/v1/completions", body);
  ASSERT_TRUE(reply.json["kv_transfer_params"].is_object()) << reply.body;
  EXPECT_FALSE(reply.json["kv_transfer_params"].contains("remote_engine_id"));
  EXPECT_TRUE(reply.json["kv_transfer_params"].contains("remote_request_id"));

  SetFault({{"kind", "malformed_block_ids"}});
  reply = PostJson(*sim_, "/v1/completions", body);
  const json& blocks = reply.json["kv_transfer_params"]["remote_block_ids"];
  ASSERT_EQ(blocks.size(), 1u) << reply.body;
  ASSERT_EQ(blocks[0].size(), 2u);
  EXPECT_TRUE(blocks[0][0].is_number_integer());
  EXPECT_EQ(blocks[0][1], "x");

  SetFault({{"kind", "malformed_block_ids"}, {"block_ids", {-3}}});
  reply = PostJson(*sim_, "/v1/completions", body);
  EXPECT_EQ(reply.json["kv_transfer_params"]["remote_block_ids"], json({-3}));

  // Descriptor rules never touch decode requests.
  SetFault({{"kind", "no_descriptor"}, {"times", -1}});
  const HttpCapture decode = Stream("/v1/completions", CompletionBody("x", 2, true), "desc-d");
  EXPECT_TRUE(decode.saw_done());
  absl::StatusOr<json> faults = sim_->Faults();
  ASSERT_TRUE(faults.ok());
  EXPECT_EQ((*faults)["faults"].back()["fired"], 0);
}

TEST_F(SimFaultsTest, SlowTokens) {
  SetFault({{"kind", "slow_tokens"}, {"interval_ms", 150}});
  const HttpCapture capture = Stream("/v1/completions", CompletionBody("slow", 4, true), "slow-1");
  EXPECT_TRUE(capture.saw_done());
  EXPECT_EQ(StreamText(capture), GenerateText("slow", 4));
  EXPECT_GE(capture.elapsed, absl::Milliseconds(450));
}

TEST_F(SimFaultsTest, RulesApplyInOrderAndCountDown) {
  ASSERT_TRUE(sim_->SetFaults(json::parse(R"({"faults":[
      {"kind":"http_status","status":429,"phase":"decode","times":2},
      {"kind":"http_status","status":502}]})"))
                  .ok());
  std::vector<int> statuses;
  for (int i = 0; i < 4; ++i) {
    statuses.push_back(PostJson(*sim_, "/v1/completions", CompletionBody("x", 1, false)).status);
  }
  EXPECT_EQ(statuses, (std::vector<int>{429, 429, 502, 200}));
  absl::StatusOr<json> faults = sim_->Faults();
  ASSERT_TRUE(faults.ok());
  ASSERT_EQ((*faults)["faults"].size(), 2u);
  EXPECT_EQ((*faults)["faults"][0]["times"], 0);
  EXPECT_EQ((*faults)["faults"][0]["fired"], 2);
  EXPECT_EQ((*faults)["faults"][1]["fired"], 1);
}

TEST_F(SimFaultsTest, InvalidDocumentsAreRejectedWhole) {
  const JsonReply reply = PostJson(*sim_, "/sim/faults", json::parse(R"({"faults":[
      {"kind":"drop_connection"},{"kind":"frob"}]})"));
  EXPECT_EQ(reply.status, 400);
  EXPECT_EQ(reply.json["error"]["message"], "faults[1].kind: unknown fault kind \"frob\"");
  absl::StatusOr<json> faults = sim_->Faults();
  ASSERT_TRUE(faults.ok());
  EXPECT_TRUE((*faults)["faults"].empty());
  EXPECT_TRUE(sim_->SetFaults(json::parse(R"({"faults":[{"kind":"http_status","status":99}]})"))
                  .message()
                  .find("faults[0].status: must be an integer 100..599") != std::string::npos);
}

TEST_F(SimFaultsTest, DeleteClearsRules) {
  SetFault({{"kind", "drop_connection"}, {"times", -1}});
  ASSERT_TRUE(sim_->ClearFaults().ok());
  EXPECT_EQ(PostJson(*sim_, "/v1/completions", CompletionBody("x", 1, false)).status, 200);
}

TEST(SimSilenceBoundTest, MaxSilenceEndsASilence) {
  auto sim = SimProcess::Start({"--max-silence-s", "0.3"});
  ASSERT_TRUE(sim.ok()) << sim.status();
  ASSERT_TRUE((*sim)->SetFaults(json::parse(R"({"faults":[{"kind":"stall_after_tokens"}]})")).ok());
  HttpCaptureOptions options;
  options.headers = {{"X-Request-Id", "bound-1"}};
  const HttpCapture capture =
      PostStream(**sim, "/v1/completions", CompletionBody("x", 5, true), options);
  // The engine cut the stream itself, long before the 10 s read timeout.
  EXPECT_NE(capture.error, httplib::Error::Success);
  EXPECT_LT(capture.elapsed, absl::Seconds(5));
  EXPECT_GE(capture.elapsed, absl::Milliseconds(300));
  EXPECT_EQ(StreamText(capture), GenerateText("x", 1));
  std::optional<json> record =
      WaitForRecord(**sim, "bound-1", [](const json& r) { return !r["end"].is_null(); });
  ASSERT_TRUE(record.has_value());
  EXPECT_EQ((*record)["end"], "fault");
}

}  // namespace
}  // namespace narwhal::testing
