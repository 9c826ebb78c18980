// The router core's placement from token ids (SPEC §14, B27/B28): what it
// asks the tokenizer, how the answer (or its absence) places the prefill,
// and conditional disaggregation — a request its decode engine holds runs
// there alone, with no prefill leg, no handoff and nothing to release.
// FakeEngineClient and a stand-in KV lookup; fake clock.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "router/fleet/kv_block_lookup.h"
#include "tests/router/router_fixture.h"

namespace narwhal::router {
namespace {

namespace nt = ::narwhal::testing;
using namespace std::chrono_literals;

// Engines hold a number of a prompt's leading blocks, whatever the prompt.
class HeldBlocks : public KvBlockLookup {
 public:
  explicit HeldBlocks(std::map<std::string, size_t> held) : held_(std::move(held)) {}
  size_t LeadingBlocks(const std::string& iid, std::span<const uint32_t> tokens) const override {
    std::lock_guard<std::mutex> lock(mu_);
    asked_.assign(tokens.begin(), tokens.end());
    auto it = held_.find(iid);
    return it == held_.end() ? 0 : std::min(it->second, tokens.size() / 16);
  }
  std::vector<uint32_t> asked() const {
    std::lock_guard<std::mutex> lock(mu_);
    return asked_;
  }

 private:
  std::map<std::string, size_t> held_;
  mutable std::mutex mu_;
  mutable std::vector<uint32_t> asked_;
};

// A /tokenize answer of `n` ids 1..n.
engines::ControlResponse TokenizeAnswer(int n) {
  nlohmann::json ids = nlohmann::json::array();
  for (int i = 1; i <= n; ++i) ids.push_back(i);
  engines::ControlResponse r;
  r.status = 200;
  r.body = nlohmann::json{{"count", n}, {"max_model_len", 4096}, {"tokens", ids}}.dump();
  return r;
}

class RouterPlacementTest : public RouterTest {
 protected:
  RouterPlacementTest() {
    settings_.engines = {nt::Engine("p0", Role::kPrefill), nt::Engine("p1", Role::kPrefill),
                         nt::Engine("d0", Role::kDecode), nt::Engine("d1", Role::kDecode)};
    settings_.placement.prefill = "kv_events";
  }
  void StartWith(HeldBlocks* held) {
    Start();
    fleet_->SetKvLookup(held);
  }
  std::vector<nt::ControlCall> TokenizeCalls() const {
    std::vector<nt::ControlCall> out;
    for (const nt::ControlCall& c : fake_.control_calls()) {
      if (c.path == "/tokenize") out.push_back(c);
    }
    return out;
  }
  double Fallbacks(const std::string& reason) {
    return Metric("narwhal_kv_tokenize_failures_total", {{"reason", reason}});
  }
};

TEST_F(RouterPlacementTest, B27_ThePrefillGoesWhereTheLongestLeadingRunIs) {
  HeldBlocks held({{"p0", 1}, {"p1", 2}, {"d0", 0}});
  fake_.SetControlResponse(TokenizeAnswer(40), "/tokenize");
  StartWith(&held);
  std::string rid;
  const Result r = Run(/*stream=*/false, Api::kCompletions, &rid);
  ASSERT_EQ(r.outcome.terminal, Terminal::kCompleted);
  ASSERT_EQ(fake_.prefill_calls().size(), 1u);
  EXPECT_EQ(fake_.prefill_calls()[0].target.iid, "p1");
  // One tokenize call, in the completion form, on an engine in placement,
  // bounded by tokenize_timeout_s.
  const std::vector<nt::ControlCall> calls = TokenizeCalls();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].method, "POST");
  EXPECT_EQ(nlohmann::json::parse(calls[0].body),
            (nlohmann::json{{"model", "m"}, {"prompt", "hi"}}));
  EXPECT_DOUBLE_EQ(calls[0].timeout_s, 0.5);
  EXPECT_EQ(held.asked().size(), 40u);
  EXPECT_EQ(held.asked().front(), 1u);
  const json row = Row(rid);
  EXPECT_EQ(row["prefill_placement"], "prefix_match");
  EXPECT_EQ(row["cached_tokens_est"], 32);
  EXPECT_EQ(row["disaggregated"], true);
  EXPECT_FALSE(row.contains("placement_fallback"));
  EXPECT_EQ(Metric("narwhal_placement_decisions_total",
                   {{"phase", "prefill"}, {"reason", "prefix_match"}}),
            1);
  WaitIdle();
  ExpectNoReservations();
}

TEST_F(RouterPlacementTest, B27_AChatRequestIsTokenizedInTheChatFormWithItsTemplateFields) {
  HeldBlocks held({});
  fake_.SetControlResponse(TokenizeAnswer(20), "/tokenize");
  StartWith(&held);
  Request request = MakeRequest(/*stream=*/true, Api::kChatCompletions);
  request.body["chat_template_kwargs"] = {{"enable_thinking", false}};
  request.body["add_generation_prompt"] = true;
  request.body["temperature"] = 0.5;
  const json messages = request.body["messages"];
  const Result r = Run(std::move(request));
  ASSERT_EQ(r.outcome.terminal, Terminal::kCompleted);
  const std::vector<nt::ControlCall> calls = TokenizeCalls();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(nlohmann::json::parse(calls[0].body),
            (nlohmann::json{{"model", "m"},
                            {"messages", messages},
                            {"add_generation_prompt", true},
                            {"chat_template_kwargs", {{"enable_thinking", false}}}}));
}

TEST_F(RouterPlacementTest, B27_APromptOfTokenIdsNeedsNoTokenizer) {
  HeldBlocks held({{"p0", 1}});
  StartWith(&held);
  Request request = MakeRequest(/*stream=*/false);
  std::vector<uint32_t> ids;
  for (uint32_t i = 0; i < 20; ++i) ids.push_back(1000 + i);
  request.body["prompt"] = ids;
  const Result r = Run(std::move(request));
  ASSERT_EQ(r.outcome.terminal, Terminal::kCompleted);
  EXPECT_TRUE(TokenizeCalls().empty());
  EXPECT_EQ(held.asked(), ids);
  ASSERT_EQ(fake_.prefill_calls().size(), 1u);
  EXPECT_EQ(fake_.prefill_calls()[0].target.iid, "p0");
}

TEST_F(RouterPlacementTest, B27_ATokenizeFailurePlacesLeastLoadedAndTheRequestCompletes) {
  HeldBlocks held({{"p1", 2}});
  engines::ControlResponse refused;
  refused.status = 500;
  fake_.SetControlResponse(refused, "/tokenize");
  StartWith(&held);
  std::string rid;
  const Result r = Run(/*stream=*/false, Api::kCompletions, &rid);
  ASSERT_EQ(r.outcome.terminal, Terminal::kCompleted);
  const json row = Row(rid);
  EXPECT_EQ(row["prefill_placement"], "least_loaded");
  EXPECT_EQ(row["cached_tokens_est"], nullptr);
  EXPECT_THAT(row.value("placement_fallback", ""), ::testing::StartsWith("error: tokenize on "));
  EXPECT_THAT(row.value("placement_fallback", ""), ::testing::HasSubstr("HTTP 500"));
  EXPECT_EQ(Fallbacks("error"), 1);
  EXPECT_TRUE(held.asked().empty());  // nothing to match

  // A timeout and an answer that is not one are fallbacks too.
  engines::ControlResponse silent;
  silent.timed_out = true;
  silent.error = "no answer within 0.5 s";
  fake_.SetControlResponse(silent, "/tokenize");
  ASSERT_EQ(Run(false).outcome.terminal, Terminal::kCompleted);
  EXPECT_EQ(Fallbacks("timeout"), 1);
  engines::ControlResponse garbage;
  garbage.status = 200;
  garbage.body = R"({"count": 2, "tokens": [1, -2]})";
  fake_.SetControlResponse(garbage, "/tokenize");
  ASSERT_EQ(Run(false).outcome.terminal, Terminal::kCompleted);
  EXPECT_EQ(Fallbacks("error"), 2);
}

TEST_F(RouterPlacementTest, B27_AnEngineThatCannotBeReachedPassesTheCallToTheNext) {
  HeldBlocks held({{"p1", 2}});
  engines::ControlResponse refused;
  refused.error = "connection refused";
  fake_.SetControlResponse(refused, "/tokenize", "p0");  // dead, still in placement
  fake_.SetControlResponse(TokenizeAnswer(40), "/tokenize");
  StartWith(&held);
  std::string rid;
  ASSERT_EQ(Run(/*stream=*/false, Api::kCompletions, &rid).outcome.terminal, Terminal::kCompleted);
  const std::vector<nt::ControlCall> calls = TokenizeCalls();
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].target.iid, "p0");
  EXPECT_NE(calls[1].target.iid, "p0");
  const json row = Row(rid);
  EXPECT_FALSE(row.contains("placement_fallback")) << row.dump();
  EXPECT_EQ(row["prefill_placement"], "prefix_match");
  // A timeout is not passed on: the bound is the call's, not each engine's.
  engines::ControlResponse silent;
  silent.timed_out = true;
  silent.error = "no answer within 0.5 s";
  fake_.SetControlResponse(silent, "/tokenize");
  fake_.SetControlResponse(silent, "/tokenize", "p0");
  ASSERT_EQ(Run(false).outcome.terminal, Terminal::kCompleted);
  EXPECT_EQ(TokenizeCalls().size(), 3u);
  EXPECT_EQ(Fallbacks("timeout"), 1);
}

TEST_F(RouterPlacementTest, B27_AListOfPromptsIsPlacedLeastLoadedWithoutATokenizeCall) {
  HeldBlocks held({{"p1", 2}});
  StartWith(&held);
  Request request = MakeRequest(/*stream=*/false);
  request.body["prompt"] = {"one", "two"};
  std::string rid = request.rid;
  Run(std::move(request));
  EXPECT_TRUE(TokenizeCalls().empty());
  EXPECT_THAT(Row(rid).value("placement_fallback", ""), ::testing::StartsWith("unsupported: "));
  EXPECT_EQ(Fallbacks("unsupported"), 1);
}

TEST_F(RouterPlacementTest, B28_AutoRunsARequestItsDecodeEngineHoldsThereAlone) {
  settings_.placement.disaggregate = "auto";
  settings_.placement.min_uncached_tokens = 16;
  // 40 tokens; d1 holds 2 blocks (32): 8 uncached < 16.
  HeldBlocks held({{"p0", 2}, {"d0", 0}, {"d1", 2}});
  fake_.SetControlResponse(TokenizeAnswer(40), "/tokenize");
  StartWith(&held);
  fake_.QueueDecode(nt::DecodeStep::Stream(
      {nt::CompletionChunk("hel"), nt::CompletionChunk("lo", "stop")}, 30ms, 10ms));
  std::string rid;
  const Result r = Run(/*stream=*/false, Api::kCompletions, &rid);
  ASSERT_EQ(r.outcome.terminal, Terminal::kCompleted);
  EXPECT_EQ(r.outcome.body["choices"][0]["text"], "hello");
  EXPECT_TRUE(fake_.prefill_calls().empty());
  const std::vector<nt::DecodeCall> decodes = ClientDecodes();
  ASSERT_EQ(decodes.size(), 1u);
  EXPECT_EQ(decodes[0].target.iid, "d1");
  ASSERT_TRUE(decodes[0].handoff.has_value());
  EXPECT_TRUE(decodes[0].handoff->local());
  EXPECT_TRUE(decodes[0].same_worker);  // no kv_transfer_params (B5's body)
  // The first token is the decode's: 30 ms to the engine's answer, 10 ms to
  // its first event.
  ASSERT_TRUE(r.outcome.ttft_s && r.outcome.first_byte_s);
  EXPECT_NEAR(*r.outcome.ttft_s, 0.04, 1e-9);
  EXPECT_EQ(*r.outcome.ttft_s, *r.outcome.first_byte_s);
  const json row = Row(rid);
  EXPECT_EQ(row["disaggregated"], false);
  EXPECT_EQ(row["prefill_placement"], "local_prefill");
  EXPECT_EQ(row["decode_placement"], "prefix_match");
  EXPECT_EQ(row["prefill_iid"], "d1");
  EXPECT_EQ(row["decode_iid"], "d1");
  EXPECT_EQ(row["cached_tokens_est"], 32);
  EXPECT_EQ(Metric("narwhal_placement_decisions_total",
                   {{"phase", "prefill"}, {"reason", "local_prefill"}}),
            1);
  EXPECT_EQ(Metric("narwhal_placement_decisions_total",
                   {{"phase", "decode"}, {"reason", "prefix_match"}}),
            1);
  WaitIdle();
  ExpectNoReservations();
}

TEST_F(RouterPlacementTest, B28_AutoDisaggregatesFromMinUncachedTokensOn) {
  settings_.placement.disaggregate = "auto";
  settings_.placement.min_uncached_tokens = 8;
  // 40 tokens; d1 holds 2 blocks: exactly 8 uncached, not fewer.
  HeldBlocks held({{"p1", 1}, {"d1", 2}});
  fake_.SetControlResponse(TokenizeAnswer(40), "/tokenize");
  StartWith(&held);
  std::string rid;
  const Result r = Run(/*stream=*/false, Api::kCompletions, &rid);
  ASSERT_EQ(r.outcome.terminal, Terminal::kCompleted);
  ASSERT_EQ(fake_.prefill_calls().size(), 1u);
  EXPECT_EQ(fake_.prefill_calls()[0].target.iid, "p1");
  const std::vector<nt::DecodeCall> decodes = ClientDecodes();
  ASSERT_EQ(decodes.size(), 1u);
  EXPECT_EQ(decodes[0].target.iid, "d1");  // the decode engine chosen first
  EXPECT_FALSE(decodes[0].handoff->local());
  const json row = Row(rid);
  EXPECT_EQ(row["disaggregated"], true);
  EXPECT_EQ(row["cached_tokens_est"], 16);  // what p1 holds
  EXPECT_EQ(row["decode_placement"], "prefix_match");
}

TEST_F(RouterPlacementTest, B28_AFailedLocalDecodeReleasesNothingAndRetriesElsewhere) {
  settings_.placement.disaggregate = "auto";
  settings_.placement.min_uncached_tokens = 16;
  settings_.serving.max_attempts = 2;
  HeldBlocks held({{"d0", 2}, {"d1", 2}});
  fake_.SetControlResponse(TokenizeAnswer(40), "/tokenize");
  StartWith(&held);
  // The first engine refuses the request before streaming (the flag a
  // crossed decode's refused handoff would carry).
  nt::DecodeStep refused = nt::DecodeStep::Fail(nt::EngineStatusFailure(503));
  refused.left_with_producer = true;
  fake_.QueueDecode(refused);
  std::string rid;
  const Result r = Run(/*stream=*/false, Api::kCompletions, &rid);
  ASSERT_EQ(r.outcome.terminal, Terminal::kCompleted);
  const std::vector<nt::DecodeCall> decodes = ClientDecodes();
  ASSERT_EQ(decodes.size(), 2u);
  EXPECT_NE(decodes[0].target.iid, decodes[1].target.iid);
  EXPECT_TRUE(decodes[1].handoff->local());
  // No release leg: a local attempt has no handoff.
  EXPECT_EQ(fake_.decode_calls().size(), 2u);
  EXPECT_TRUE(fake_.prefill_calls().empty());
  const json row = Row(rid);
  EXPECT_EQ(row["attempts"], 2);
  EXPECT_EQ(row["handoff_abandoned"], nullptr);
  EXPECT_EQ(TokenizeCalls().size(), 1u);  // asked once per request
  WaitIdle();
  ExpectNoReservations();
}

}  // namespace
}  // namespace narwhal::router
