// A request that cannot fit in the model's context (max_model_len): the pure
// check (router/context_limit) and the router's refusal at admission — 400
// invalid_request_error naming the limit, journal terminal "invalid", no
// engine leg and so no breaker evidence.
#include "router/context_limit.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include <chrono>
#include <memory>
#include <string>

#include "engines/http/io_loops.h"
#include "router/common/journal.h"
#include "router/common/metrics.h"
#include "router/common/settings.h"
#include "router/fleet/fleet.h"
#include "router/router.h"
#include "tests/fakes/edge_status.h"
#include "tests/fakes/fake_clock.h"
#include "tests/fakes/fake_engine_client.h"
#include "tests/fakes/test_sink.h"
#include "tests/router/test_util.h"

namespace narwhal::router {
namespace {

namespace nt = ::narwhal::testing;
using namespace std::chrono_literals;
using engines::Api;
using ::narwhal::testing::ErrorTypeOf;
using ::narwhal::testing::HttpStatus;
using ::narwhal::testing::ReasonOf;
using json = nlohmann::json;
using ::testing::HasSubstr;

json Completion(json prompt, json max_tokens) {
  json b = {{"model", "m"}, {"prompt", std::move(prompt)}};
  if (!max_tokens.is_null()) b["max_tokens"] = std::move(max_tokens);
  return b;
}

TEST(ContextLimitErrorTest, UnknownLimitNeverRefuses) {
  EXPECT_EQ(ContextLimitError(Completion("hi", 1 << 30), Api::kCompletions, 0), "");
}

TEST(ContextLimitErrorTest, MaxTokensWithinTheLimitPasses) {
  EXPECT_EQ(ContextLimitError(Completion("hi", 4096), Api::kCompletions, 4096), "");
  EXPECT_EQ(ContextLimitError(Completion("hi", nullptr), Api::kCompletions, 4096), "");
}

TEST(ContextLimitErrorTest, MaxTokensOverTheLimitNamesTheLimit) {
  EXPECT_EQ(ContextLimitError(Completion("hi", 4097), Api::kCompletions, 4096),
            "max_tokens 4097 exceeds the model's context length (max_model_len 4096)");
}

TEST(ContextLimitErrorTest, TokenIdPromptsCountTowardsTheLimit) {
  const json ids = json::array({1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  EXPECT_EQ(ContextLimitError(Completion(ids, 90), Api::kCompletions, 100), "");
  EXPECT_EQ(ContextLimitError(Completion(ids, 91), Api::kCompletions, 100),
            "10 prompt tokens + max_tokens 91 = 101 exceeds the model's context length "
            "(max_model_len 100)");
  // A batch of id lists: the longest decides.
  const json batch = json::array({json::array({1, 2}), ids});
  EXPECT_NE(ContextLimitError(Completion(batch, 91), Api::kCompletions, 100), "");
  // A prompt that fills the context leaves no room, whatever max_tokens says.
  EXPECT_THAT(ContextLimitError(Completion(ids, nullptr), Api::kCompletions, 10),
              HasSubstr("the prompt has 10 tokens"));
}

TEST(ContextLimitErrorTest, TextPromptsCountAsNothing) {
  const std::string long_text(100000, 'x');
  EXPECT_EQ(ContextLimitError(Completion(long_text, 10), Api::kCompletions, 100), "");
}

TEST(ContextLimitErrorTest, ChatMaxCompletionTokensWinsOverMaxTokens) {
  json chat = {{"model", "m"},
               {"messages", {{{"role", "user"}, {"content", "hi"}}}},
               {"max_tokens", 10},
               {"max_completion_tokens", 200}};
  EXPECT_EQ(ContextLimitError(chat, Api::kChatCompletions, 100),
            "max_completion_tokens 200 exceeds the model's context length (max_model_len 100)");
  chat["max_completion_tokens"] = 50;
  chat["max_tokens"] = 500;
  EXPECT_EQ(ContextLimitError(chat, Api::kChatCompletions, 100), "");
}

// --- The router refuses before any leg. ---

class ContextLimitRouterTest : public ::testing::Test {
 protected:
  ContextLimitRouterTest() : fake_(&clock_), metrics_(registry_) {
    settings_.model = "m";
    settings_.engines = {{"p0", "http://p0:8000", Role::kPrefill},
                         {"p1", "http://p1:8000", Role::kPrefill},
                         {"d0", "http://d0:8000", Role::kDecode},
                         {"d1", "http://d1:8000", Role::kDecode}};
    settings_.recovery.failure_quarantine_s = 30;  // any evidence would show
    journal_path_ = ::testing::TempDir() + "narwhal_context_limit_" +
                    ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".jsonl";
    std::remove(journal_path_.c_str());
    auto journal = Journal::Open(journal_path_);
    EXPECT_TRUE(journal.ok());
    journal_ = std::move(*journal);
    fleet_ = std::make_unique<Fleet>(settings_, clock_, &metrics_, journal_.get());
    router_ =
        std::make_unique<Router>(settings_, fake_, *fleet_, clock_, &metrics_, journal_.get(), 7);
  }
  ~ContextLimitRouterTest() override {
    router_.reset();
    fleet_.reset();
    journal_.reset();
    std::remove(journal_path_.c_str());
  }

  Outcome Serve(json body, Api api = Api::kCompletions, std::string* rid = nullptr) {
    Request r;
    r.rid = router_->NewRequestId();
    if (rid != nullptr) *rid = r.rid;
    r.api = api;
    r.body = std::move(body);
    r.arrived = clock_.Now();
    r.deadline = r.arrived + engines::FromSeconds(30);
    auto sink = std::make_shared<nt::TestSink>();
    router_->Submit(std::move(r), sink, loops_.Next());
    nt::Chunk c;
    const auto until = std::chrono::steady_clock::now() + 10s;
    while (std::chrono::steady_clock::now() < until) {
      if (sink->Next(&c, 100ms) == nt::TestSink::Pop::kEnd) return sink->outcome();
    }
    ADD_FAILURE() << "the request did not end";
    return {};
  }

  json Row(const std::string& rid) {
    journal_->Flush();
    for (const json& row : nt::ReadJournal(journal_path_)) {
      if (row.value("rid", "") == rid) return row;
    }
    return json::object();
  }

  engines::IoLoops loops_{2};
  Settings settings_;
  nt::FakeClock clock_;
  nt::FakeEngineClient fake_;
  prometheus::Registry registry_;
  Metrics metrics_;
  std::string journal_path_;
  std::unique_ptr<Journal> journal_;
  std::unique_ptr<Fleet> fleet_;
  std::unique_ptr<Router> router_;
};

TEST_F(ContextLimitRouterTest, OverTheLimitIsRefusedBeforeAnyPrefillAndCountedInvalid) {
  fleet_->control().RecordMaxModelLen("d0", 4096);
  EXPECT_EQ(fleet_->max_model_len(), 4096);
  std::string rid;
  const Outcome o = Serve(Completion("hi", 5000), Api::kCompletions, &rid);
  EXPECT_EQ(o.terminal, Terminal::kInvalid);
  EXPECT_EQ(HttpStatus(o), 400);
  EXPECT_EQ(ErrorTypeOf(o), server::ErrorType::kInvalidRequest);
  EXPECT_EQ(o.message, "max_tokens 5000 exceeds the model's context length (max_model_len 4096)");
  EXPECT_EQ(o.param, "prompt");  // the field OpenAI names for a completion
  EXPECT_TRUE(fake_.prefill_calls().empty());
  EXPECT_TRUE(fake_.decode_calls().empty());
  EXPECT_EQ(nt::MetricValue(registry_, "narwhal_requests_total", {{"terminal", "invalid"}}), 1);
  EXPECT_NE(nt::MetricValue(registry_, "narwhal_requests_total", {{"terminal", "failed"}}), 1);
  const json row = Row(rid);
  EXPECT_EQ(row["terminal"], "invalid");
  EXPECT_EQ(row["reason"], "context_length_exceeded");
  // No breaker evidence: every engine still serving, no streak, no hold.
  for (const EngineSnapshot& s : fleet_->admin().Snapshot()) {
    EXPECT_EQ(s.state, PlacementState::kServing) << s.settings.iid;
    for (int v : s.streak) EXPECT_EQ(v, 0) << s.settings.iid;
  }
  EXPECT_EQ(router_->inflight(), 0);
}

TEST_F(ContextLimitRouterTest, AChatOverTheLimitNamesItsMessages) {
  fleet_->control().RecordMaxModelLen("d0", 4096);
  const json chat = {
      {"model", "m"}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 5000}};
  const Outcome o = Serve(chat, Api::kChatCompletions);
  EXPECT_EQ(o.terminal, Terminal::kInvalid);
  EXPECT_EQ(o.param, "messages");
}

TEST_F(ContextLimitRouterTest, WithinTheLimitIsServed) {
  fleet_->control().RecordMaxModelLen("d0", 4096);
  const Outcome o = Serve(Completion("hi", 8));
  EXPECT_EQ(o.terminal, Terminal::kCompleted);
  EXPECT_EQ(fake_.prefill_calls().size(), 1u);
}

TEST_F(ContextLimitRouterTest, UnknownLimitLeavesTheJudgementToTheEngines) {
  const Outcome o = Serve(Completion("hi", 1000000));
  EXPECT_EQ(o.terminal, Terminal::kCompleted);
}

TEST_F(ContextLimitRouterTest, TheSmallestReportedLimitHolds) {
  fleet_->control().RecordMaxModelLen("d0", 8192);
  fleet_->control().RecordMaxModelLen("d1", 4096);
  fleet_->control().RecordMaxModelLen("p0", 16384);
  EXPECT_EQ(fleet_->max_model_len(), 4096);
  fleet_->control().RecordMaxModelLen("p1", 0);  // says nothing
  EXPECT_EQ(fleet_->max_model_len(), 4096);
}

TEST(ContextLimitFleetTest, APinnedContractGivesTheLimitFromStart) {
  Settings s;
  s.model = "m";
  s.engines = {{"p0", "http://p0:8000", Role::kPrefill}, {"d0", "http://d0:8000", Role::kDecode}};
  EngineContract c;
  c.vllm_version = "0.29.1";
  c.max_model_len = 2048;
  s.engine_contract = c;
  nt::FakeClock clock;
  Fleet fleet(s, clock, nullptr);
  EXPECT_EQ(fleet.max_model_len(), 2048);
}

}  // namespace
}  // namespace narwhal::router
