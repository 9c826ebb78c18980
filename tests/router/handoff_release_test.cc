// Release of abandoned KV handoffs (router/handoff_releaser.h) through the
// router core, against the scripted fake engine client on fake time: which
// situations release, by which mechanism, under which bound, and that a
// release is never breaker evidence. No sockets, no real sleeps (real time
// only bounds the waits for the detached release legs).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <prometheus/registry.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "engines/http/io_loops.h"
#include "router/common/journal.h"
#include "router/common/metrics.h"
#include "router/common/settings.h"
#include "router/fleet/fleet.h"
#include "router/handoff_releaser.h"
#include "router/router.h"
#include "tests/fakes/edge_status.h"
#include "tests/fakes/fake_clock.h"
#include "tests/fakes/fake_engine_client.h"
#include "tests/fakes/test_engine.h"
#include "tests/fakes/test_sink.h"
#include "tests/router/test_util.h"

namespace narwhal::router {
namespace {

namespace nt = ::narwhal::testing;
using server::ErrorType;
using server::ErrorTypeName;
using namespace std::chrono_literals;
using engines::FromSeconds;
using json = nlohmann::json;

using ::narwhal::testing::Engine;

class HandoffReleaseTest : public ::testing::Test {
 protected:
  HandoffReleaseTest() : fake_(&clock_) {
    settings_.model = "m";
    settings_.engines = {Engine("p0", Role::kPrefill), Engine("d0", Role::kDecode)};
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    journal_path_ = ::testing::TempDir() + "narwhal_release_" + info->name() + "_" +
                    std::to_string(::getpid()) + ".jsonl";
    std::remove(journal_path_.c_str());
  }
  ~HandoffReleaseTest() override {
    router_.reset();
    fleet_.reset();
    journal_.reset();
    std::remove(journal_path_.c_str());
  }

  void Start() {
    metrics_ = std::make_unique<Metrics>(registry_);
    auto journal = Journal::Open(journal_path_);
    ASSERT_TRUE(journal.ok()) << journal.status();
    journal_ = std::move(*journal);
    fleet_ = std::make_unique<Fleet>(settings_, clock_, metrics_.get(), journal_.get());
    router_ = std::make_unique<Router>(settings_, fake_, *fleet_, clock_, metrics_.get(),
                                       journal_.get(), 7, &journal_status_);
  }

  Request MakeRequest() {
    Request r;
    r.rid = router_->NewRequestId();
    r.api = engines::Api::kCompletions;
    r.stream = true;
    r.body = {{"model", "m"},    {"prompt", "hi"}, {"max_tokens", 8},
              {"min_tokens", 2}, {"stream", true}, {"stream_options", {{"include_usage", true}}}};
    r.arrived = clock_.Now();
    r.arrived_wall = clock_.WallNow();
    r.deadline = r.arrived + FromSeconds(settings_.serving.request_timeout_s);
    return r;
  }

  // Runs one request to its end; `sink` may be made by the caller (to
  // cancel it from a scripted step).
  Outcome Run(Request request, std::shared_ptr<nt::TestSink> sink = nullptr) {
    if (!sink) sink = std::make_shared<nt::TestSink>();
    rid_ = request.rid;
    router_->Submit(std::move(request), sink, loops_.Next());
    const auto until = std::chrono::steady_clock::now() + 10s;
    nt::Chunk c;
    while (std::chrono::steady_clock::now() < until) {
      if (sink->Next(&c, 50ms) == nt::TestSink::Pop::kEnd) return sink->outcome();
    }
    ADD_FAILURE() << "the request did not end within 10 s";
    return {};
  }

  // A request whose client goes away once its prefill is done (the decode
  // leg finds its cancel token fired before it sends anything); `release`
  // scripts the release leg that follows.
  Outcome RunCancelledAfterPrefill(std::optional<nt::DecodeStep> release = std::nullopt) {
    auto sink = std::make_shared<nt::TestSink>();
    nt::DecodeStep step = nt::DecodeStep::Stream({nt::CompletionChunk("x", "stop")});
    step.on_start = [sink] { sink->Cancel(); };
    fake_.QueueDecode(std::move(step));
    if (release) fake_.QueueDecode(std::move(*release));
    return Run(MakeRequest(), sink);
  }

  double Metric(const std::string& name, const std::map<std::string, std::string>& labels) {
    return nt::MetricValue(registry_, name, labels);
  }
  double Releases(const std::string& outcome) {
    return Metric("narwhal_handoff_releases_total", {{"outcome", outcome}});
  }
  double Abandoned(const std::string& reason) {
    return Metric("narwhal_handoffs_abandoned_total", {{"reason", reason}});
  }
  // Waits (real time, bounded) until `n` releases ended with `outcome`.
  bool WaitReleases(const std::string& outcome, double n) {
    const auto until = std::chrono::steady_clock::now() + 10s;
    while (std::chrono::steady_clock::now() < until) {
      if (Releases(outcome) >= n) return true;
      std::this_thread::sleep_for(1ms);
    }
    return false;
  }
  json Row(const std::string& rid) {
    journal_->Flush();
    for (const json& row : nt::ReadJournal(journal_path_)) {
      if (row.value("rid", "") == rid) return row;
    }
    ADD_FAILURE() << "no journal row for " << rid;
    return json::object();
  }
  // The release leg: the decode call whose backend id ends in "r".
  std::vector<nt::DecodeCall> ReleaseCalls() {
    std::vector<nt::DecodeCall> out;
    for (const nt::DecodeCall& c : fake_.decode_calls()) {
      if (!c.backend_request_id.empty() && c.backend_request_id.back() == 'r') out.push_back(c);
    }
    return out;
  }

  engines::IoLoops loops_{2};
  Settings settings_;
  nt::FakeClock clock_;
  nt::FakeEngineClient fake_;
  prometheus::Registry registry_;
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<Journal> journal_;
  std::unique_ptr<Fleet> fleet_;
  const server::StatusTableJournal journal_status_{};
  std::unique_ptr<Router> router_;
  std::string journal_path_;
  std::string rid_;
};

TEST_F(HandoffReleaseTest, EveryLabelIsExportedAtZeroFromTheStart) {
  Start();
  for (std::string_view reason : kAbandonReasonNames) {
    EXPECT_EQ(Abandoned(std::string(reason)), 0) << reason;
  }
  for (std::string_view outcome : kReleaseOutcomeNames) {
    EXPECT_EQ(Releases(std::string(outcome)), 0) << outcome;
  }
}

TEST_F(HandoffReleaseTest, ReleaseBodyAsksForOneUnstreamedToken) {
  const json client = {
      {"model", "m"},      {"prompt", "hi"}, {"max_tokens", 64},     {"max_completion_tokens", 64},
      {"min_tokens", 4},   {"stream", true}, {"stream_options", {}}, {"n", 1},
      {"temperature", 0.5}};
  const json pull = ReleaseBody(client, /*reject=*/false);
  EXPECT_EQ(pull["max_tokens"], 1);
  EXPECT_EQ(pull["max_completion_tokens"], 1);
  EXPECT_EQ(pull["stream"], false);
  EXPECT_FALSE(pull.contains("min_tokens"));
  EXPECT_FALSE(pull.contains("stream_options"));
  EXPECT_FALSE(pull.contains("n"));
  EXPECT_EQ(pull["prompt"], "hi");  // the prompt is what the blocks hold
  EXPECT_EQ(pull["model"], "m");
  EXPECT_EQ(ReleaseBody(client, /*reject=*/true)["model"], kReleaseRejectModel);
}

TEST_F(HandoffReleaseTest, ClientGoneAfterPrefillReleasesByAOneTokenPull) {
  Start();
  const Outcome o = RunCancelledAfterPrefill();
  EXPECT_EQ(o.terminal, Terminal::kCancelled);
  ASSERT_TRUE(WaitReleases("released", 1));
  EXPECT_EQ(Abandoned("cancelled"), 1);
  const std::vector<nt::DecodeCall> releases = ReleaseCalls();
  ASSERT_EQ(releases.size(), 1u);
  const nt::DecodeCall& r = releases[0];
  EXPECT_EQ(r.target.iid, "d0");
  EXPECT_EQ(r.backend_request_id, rid_ + "-1r");
  EXPECT_EQ(r.body["max_tokens"], 1);
  EXPECT_EQ(r.body["stream"], false);
  EXPECT_FALSE(r.client_streams);
  ASSERT_TRUE(r.handoff.has_value());
  EXPECT_EQ(r.handoff->producer_iid(), "p0");
  EXPECT_EQ(r.handoff->descriptor(), fake_.prefill_calls()[0].result->descriptor());
  // The release leg is bounded by handoff.release_timeout_s.
  EXPECT_EQ(r.request_deadline - r.started, FromSeconds(settings_.handoff.release_timeout_s));
  const json row = Row(rid_);
  EXPECT_EQ(row["handoff_abandoned"], "cancelled");
  EXPECT_EQ(row["handoff_released"], true);
}

TEST_F(HandoffReleaseTest, ACompletedDecodeReleasesNothing) {
  Start();
  const Outcome o = Run(MakeRequest());
  EXPECT_EQ(o.terminal, Terminal::kCompleted);
  EXPECT_TRUE(ReleaseCalls().empty());
  for (std::string_view reason : kAbandonReasonNames) {
    EXPECT_EQ(Abandoned(std::string(reason)), 0) << reason;
  }
  const json row = Row(rid_);
  EXPECT_TRUE(row["handoff_abandoned"].is_null());
  EXPECT_TRUE(row["handoff_released"].is_null());
}

TEST_F(HandoffReleaseTest, OffCountsTheAbandonedHandoffAndSendsNothing) {
  settings_.handoff.release = "off";
  Start();
  RunCancelledAfterPrefill();
  EXPECT_EQ(Abandoned("cancelled"), 1);
  EXPECT_EQ(Releases("off"), 1);
  EXPECT_TRUE(ReleaseCalls().empty());
  EXPECT_EQ(fake_.decode_calls().size(), 1u);
  EXPECT_EQ(Row(rid_)["handoff_released"], false);
}

TEST_F(HandoffReleaseTest, RejectSendsTheDescriptorUnderAnUnservedModel) {
  settings_.handoff.release = "reject";
  Start();
  // The consumer refuses it before admission (404 for the model).
  RunCancelledAfterPrefill(nt::DecodeStep::Fail(nt::EngineStatusFailure(404, "no such model")));
  ASSERT_TRUE(WaitReleases("rejected", 1));
  const std::vector<nt::DecodeCall> releases = ReleaseCalls();
  ASSERT_EQ(releases.size(), 1u);
  EXPECT_EQ(releases[0].body["model"], kReleaseRejectModel);
  EXPECT_EQ(releases[0].body["max_tokens"], 1);
  // A refusal asked for is not breaker evidence.
  for (const EngineSnapshot& s : fleet_->admin().Snapshot()) {
    for (int streak : s.streak) EXPECT_EQ(streak, 0) << s.settings.iid;
  }
}

TEST_F(HandoffReleaseTest, HandoffPastTheAgeLimitButInsideTheLeaseIsReleased) {
  settings_.serving.handoff_timeout_s = 1;
  settings_.handoff.lease_s = 30;
  Start();
  fake_.QueuePrefill(nt::PrefillStep::Ok(2s));
  const Outcome o = Run(MakeRequest());
  EXPECT_EQ(nt::ErrorTypeOf(o), ErrorType::kHandoffExpired);
  ASSERT_TRUE(WaitReleases("released", 1));
  EXPECT_EQ(Abandoned("expired"), 1);
  // The client's decode never ran; only the release did.
  ASSERT_EQ(fake_.decode_calls().size(), 1u);
  EXPECT_EQ(ReleaseCalls().size(), 1u);
}

TEST_F(HandoffReleaseTest, HandoffPastTheLeaseIsNotReleased) {
  settings_.serving.handoff_timeout_s = 1;
  settings_.handoff.lease_s = 2;
  Start();
  fake_.QueuePrefill(nt::PrefillStep::Ok(3s));
  Run(MakeRequest());
  EXPECT_EQ(Abandoned("expired"), 1);
  EXPECT_EQ(Releases("lease_ended"), 1);
  EXPECT_TRUE(fake_.decode_calls().empty());
}

TEST_F(HandoffReleaseTest, NoConsumerAfterThePrefillCountsAndReleasesNothing) {
  Start();
  nt::PrefillStep step = nt::PrefillStep::Ok();
  step.on_start = [this] { ASSERT_TRUE(fleet_->admin().Eject("d0", "operator").ok()); };
  fake_.QueuePrefill(std::move(step));
  const Outcome o = Run(MakeRequest());
  EXPECT_EQ(nt::ReasonOf(o), "no_engine");
  EXPECT_EQ(Abandoned("no_consumer"), 1);
  // The producer cannot pull its own handoff: nobody to release through.
  EXPECT_EQ(Releases("no_consumer"), 1);
  EXPECT_TRUE(fake_.decode_calls().empty());
}

TEST_F(HandoffReleaseTest, AConsumerRefusalBeforeAdmissionReleasesThroughAnotherConsumer) {
  settings_.engines = {Engine("p0", Role::kPrefill), Engine("d0", Role::kDecode),
                       Engine("d1", Role::kDecode)};
  Start();
  // The consumer answers 503 (its admission check) before owning the
  // request; the release then goes to the other consumer.
  nt::DecodeStep refused = nt::DecodeStep::Fail(nt::EngineStatusFailure(503, "queue full"));
  refused.left_with_producer = true;
  fake_.QueueDecode(std::move(refused));
  const Outcome o = Run(MakeRequest());
  EXPECT_EQ(o.terminal, Terminal::kFailed);
  ASSERT_TRUE(WaitReleases("released", 1));
  EXPECT_EQ(Abandoned("consumer_refused"), 1);
  const std::vector<nt::DecodeCall> calls = fake_.decode_calls();
  ASSERT_EQ(calls.size(), 2u);
  // The release avoids the consumer that refused.
  EXPECT_NE(calls[1].target.iid, calls[0].target.iid);
  EXPECT_EQ(calls[1].backend_request_id, rid_ + "-1r");
}

TEST_F(HandoffReleaseTest, ADecodeTheConsumerMayOwnIsNotReleased) {
  Start();
  // Sent, then the consumer went silent: it may hold the request (vLLM then
  // frees or pulls the blocks itself), so no second consumer touches them.
  fake_.QueueDecode(nt::DecodeStep::Fail(nt::FirstTokenTimeout()));
  Run(MakeRequest());
  EXPECT_TRUE(ReleaseCalls().empty());
  for (std::string_view reason : kAbandonReasonNames) {
    EXPECT_EQ(Abandoned(std::string(reason)), 0) << reason;
  }
}

TEST_F(HandoffReleaseTest, AFailedReleaseIsNeverBreakerEvidence) {
  settings_.recovery.eject_after = 1;
  Start();
  RunCancelledAfterPrefill(nt::DecodeStep::Fail(nt::ConnectRefused()));
  ASSERT_TRUE(WaitReleases("failed", 1));
  for (const EngineSnapshot& s : fleet_->admin().Snapshot()) {
    EXPECT_EQ(s.state, PlacementState::kServing) << s.settings.iid;
    for (int streak : s.streak) EXPECT_EQ(streak, 0) << s.settings.iid;
  }
  // The next request is placed as before.
  EXPECT_EQ(Run(MakeRequest()).terminal, Terminal::kCompleted);
}

TEST_F(HandoffReleaseTest, AReleaseSlowerThanItsTimeoutEndsAtTheTimeout) {
  settings_.handoff.release_timeout_s = 1;
  Start();
  RunCancelledAfterPrefill(nt::DecodeStep::Stream({nt::CompletionChunk("x", "stop")}, 5s));
  ASSERT_TRUE(WaitReleases("timeout", 1));
  EXPECT_EQ(Releases("released"), 0);
}

TEST_F(HandoffReleaseTest, ReleasesBeyondTheCapAreDroppedAndCounted) {
  settings_.handoff.release_max_inflight = 1;
  Start();
  // The first release blocks until shutdown; the second finds the cap full.
  auto first = std::make_shared<nt::TestSink>();
  nt::DecodeStep cancel_first = nt::DecodeStep::Stream({nt::CompletionChunk("x", "stop")});
  cancel_first.on_start = [first] { first->Cancel(); };
  fake_.QueueDecode(std::move(cancel_first));
  fake_.QueueDecode(nt::DecodeStep::BlockAfter({}));
  Run(MakeRequest(), first);
  ASSERT_TRUE(fake_.WaitForBlocked(1));
  RunCancelledAfterPrefill();
  EXPECT_EQ(Abandoned("cancelled"), 2);
  EXPECT_EQ(Releases("dropped"), 1);
  EXPECT_EQ(Row(rid_)["handoff_released"], false);
  EXPECT_EQ(ReleaseCalls().size(), 1u);
  // Shutdown ends the running release.
  router_.reset();
  EXPECT_EQ(Releases("cancelled"), 1);
  // Its reservation was returned.
  for (const EngineSnapshot& s : fleet_->admin().Snapshot()) EXPECT_EQ(s.inflight_decode, 0);
}

}  // namespace
}  // namespace narwhal::router
