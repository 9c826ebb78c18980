// A producer frees a handoff's lease when a consumer refuses the request
// carrying it before admission (vLLM's notify_kv_transfer_request_rejected)
// and when a consumer pulls it: real narwhal-sim processes, GET /sim/kv.
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "tests/engines/sim/sim_test_util.h"

namespace narwhal::testing {
namespace {

using nlohmann::json;

std::unique_ptr<SimProcess> StartReleaseSim(std::vector<std::string> args) {
  auto sim = SimProcess::Start(std::move(args));
  EXPECT_TRUE(sim.ok()) << sim.status();
  return sim.ok() ? *std::move(sim) : nullptr;
}

json Prefill(SimProcess& producer, const json& body, const std::string& request_id) {
  const JsonReply reply =
      PostJson(producer, "/v1/completions", PrefillBody(body), {{"X-Request-Id", request_id}});
  EXPECT_EQ(reply.status, 200) << reply.body;
  return reply.json.value("kv_transfer_params", json());
}

json WithDescriptor(json body, const json& descriptor) {
  body["kv_transfer_params"] = descriptor;
  return body;
}

class SimReleaseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    producer_ = StartReleaseSim({"--engine-id", "p0", "--role", "prefill"});
    consumer_ = StartReleaseSim({"--engine-id", "d0", "--role", "decode"});
    ASSERT_NE(producer_, nullptr);
    ASSERT_NE(consumer_, nullptr);
  }
  json Kv() {
    absl::StatusOr<json> kv = producer_->Kv();
    EXPECT_TRUE(kv.ok()) << kv.status();
    return kv.ok() ? *kv : json::object();
  }
  std::unique_ptr<SimProcess> producer_;
  std::unique_ptr<SimProcess> consumer_;
};

TEST_F(SimReleaseTest, ARefusalBeforeAdmissionFreesTheLease) {
  const json body = CompletionBody("pinned prompt", 4, false);
  const json descriptor = Prefill(*producer_, body, "r-1");
  ASSERT_TRUE(descriptor.is_object());
  ASSERT_EQ(Kv()["held"].size(), 1u);

  // A model the consumer does not serve: 404 before admission.
  json refused = WithDescriptor(body, descriptor);
  refused["model"] = "narwhal-handoff-release";
  const JsonReply reply =
      PostJson(*consumer_, "/v1/completions", refused, {{"X-Request-Id", "r-1"}});
  EXPECT_EQ(reply.status, 404) << reply.body;

  // The producer was told before the refusal was answered.
  const json kv = Kv();
  EXPECT_TRUE(kv["held"].empty()) << kv.dump();
  ASSERT_EQ(kv["released"].size(), 1u) << kv.dump();
  EXPECT_EQ(kv["released"][0]["state"], "released");
  EXPECT_EQ(kv["released"][0]["remote_request_id"], descriptor["remote_request_id"]);
  EXPECT_EQ(kv["released"][0]["consumer"]["engine_id"], "d0");
  EXPECT_TRUE(kv["consumed"].empty());

  // A released handoff cannot be pulled any more.
  const HttpCapture late =
      PostStream(*consumer_, "/v1/completions",
                 WithDescriptor(CompletionBody("pinned prompt", 4, true), descriptor));
  EXPECT_EQ(late.status, 200);
  ASSERT_FALSE(late.events.empty());
  EXPECT_NE(late.events[0].find("Internal server error"), std::string::npos) << late.body;
}

TEST_F(SimReleaseTest, AnAdmissionFaultOnTheConsumerFreesTheLease) {
  const json body = CompletionBody("queued prompt", 4, false);
  const json descriptor = Prefill(*producer_, body, "r-2");
  ASSERT_TRUE(consumer_
                  ->SetFaults(json::parse(
                      R"({"faults":[{"kind":"http_status","status":503,"phase":"decode"}]})"))
                  .ok());
  const JsonReply reply = PostJson(*consumer_, "/v1/completions", WithDescriptor(body, descriptor));
  EXPECT_EQ(reply.status, 503) << reply.body;
  const json kv = Kv();
  EXPECT_TRUE(kv["held"].empty()) << kv.dump();
  EXPECT_EQ(kv["released"].size(), 1u) << kv.dump();
}

TEST_F(SimReleaseTest, AOneTokenPullFreesTheLease) {
  const json body = CompletionBody("pulled prompt", 8, false);
  const json descriptor = Prefill(*producer_, body, "r-3");
  json pull = WithDescriptor(body, descriptor);
  pull["max_tokens"] = 1;
  const JsonReply reply = PostJson(*consumer_, "/v1/completions", pull);
  EXPECT_EQ(reply.status, 200) << reply.body;
  EXPECT_EQ(reply.json["usage"]["completion_tokens"], 1);
  const json kv = Kv();
  EXPECT_TRUE(kv["held"].empty()) << kv.dump();
  EXPECT_EQ(kv["consumed"].size(), 1u) << kv.dump();
}

TEST_F(SimReleaseTest, ARefusalWithoutADescriptorLeavesOtherHandoffsPinned) {
  const json body = CompletionBody("other prompt", 4, false);
  ASSERT_TRUE(Prefill(*producer_, body, "r-4").is_object());
  json refused = body;
  refused["model"] = "narwhal-handoff-release";
  EXPECT_EQ(PostJson(*consumer_, "/v1/completions", refused).status, 404);
  const json kv = Kv();
  EXPECT_EQ(kv["held"].size(), 1u) << kv.dump();
  EXPECT_TRUE(kv["released"].empty());
}

}  // namespace
}  // namespace narwhal::testing
