// The router core end to end against a scripted fake EngineClient and a fake
// clock: admission, placement, the attempt loop, retries, breaker bookkeeping,
// measurement, the journal and the metrics. No sockets, no real sleeps.
#include "router/router.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <prometheus/registry.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <ostream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "engines/engine_failure.h"
#include "engines/http/io_loops.h"
#include "engines/run_blocking.h"
#include "router/common/journal.h"
#include "router/common/metrics.h"
#include "router/common/settings.h"
#include "router/fleet/fleet.h"
#include "tests/fakes/blocking_legs.h"
#include "tests/fakes/edge_status.h"
#include "tests/fakes/fake_clock.h"
#include "tests/fakes/fake_engine_client.h"
#include "tests/fakes/test_engine.h"
#include "tests/fakes/test_sink.h"
#include "tests/router/router_fixture.h"
#include "tests/router/test_util.h"

namespace narwhal::router {

// Readable gtest messages for the outcome enums (found by ADL).
void PrintTo(Terminal t, std::ostream* os) { *os << TerminalName(t); }

}  // namespace narwhal::router

namespace narwhal::server {
void PrintTo(ErrorType t, std::ostream* os) { *os << "'" << ErrorTypeName(t) << "'"; }
}  // namespace narwhal::server

namespace narwhal::router {

namespace {

namespace nt = ::narwhal::testing;
using server::ErrorType;
using server::ErrorTypeName;
using namespace std::chrono_literals;
using engines::Api;
using engines::FromSeconds;
using engines::Seconds;
using json = nlohmann::json;
using ::narwhal::testing::Chunk;
using ::testing::HasSubstr;
using ::testing::StartsWith;

using ::narwhal::testing::Engine;

// ---------------------------------------------------------------------------
// Happy paths, measurement (B9), assembly.

TEST_F(RouterTest, B9_StreamingRelaysChunksInOrderAndMeasuresExactly) {
  Start();
  fake_.QueuePrefill(nt::PrefillStep::Ok(250ms));
  const std::vector<std::string> payloads = {nt::ChatRoleChunk(), nt::ChatChunk("a"),
                                             nt::ChatChunk("b", "stop")};
  // Role chunk at 0.4375 s, "a" at 0.5 s, "b" at 0.5625 s after arrival.
  fake_.QueueDecode(nt::DecodeStep::Stream(payloads, 125ms, 62500us));
  std::string rid;
  Result r = Run(/*stream=*/true, Api::kChatCompletions, &rid);

  ASSERT_TRUE(r.ended);
  ASSERT_EQ(r.chunks.size(), 3u);
  for (size_t i = 0; i < payloads.size(); ++i) EXPECT_EQ(r.chunks[i].data, payloads[i]) << i;
  EXPECT_EQ(r.chunks[0].tokens, 0);
  EXPECT_EQ(r.chunks[1].text, "a");
  EXPECT_EQ(r.chunks[2].finish_reason, "stop");
  const Outcome& o = r.outcome;
  EXPECT_EQ(o.terminal, Terminal::kCompleted);
  EXPECT_EQ(nt::HttpStatus(o), 200);
  EXPECT_TRUE(o.output_started);
  ASSERT_TRUE(o.ttft_s.has_value());
  ASSERT_TRUE(o.first_byte_s.has_value());
  EXPECT_DOUBLE_EQ(*o.ttft_s, 0.25);
  EXPECT_DOUBLE_EQ(*o.first_byte_s, 0.5);
  EXPECT_EQ(o.output_tokens, 2);
  EXPECT_EQ(o.finish_reason, "stop");

  const json row = Row(rid);
  EXPECT_EQ(row["terminal"], "completed");
  EXPECT_EQ(row["status"], 200);
  EXPECT_TRUE(row["reason"].is_null());
  EXPECT_TRUE(row["error_type"].is_null());
  EXPECT_EQ(row["api"], "chat");
  EXPECT_EQ(row["stream"], true);
  EXPECT_EQ(row["client_rid"], "client-" + rid.substr(0, 4));
  EXPECT_DOUBLE_EQ(row["arrived"].get<double>(), 1.7e9);
  EXPECT_EQ(row["prefill_iid"], "p0");
  EXPECT_EQ(row["decode_iid"], "d0");
  EXPECT_EQ(row["crossed"], true);
  EXPECT_EQ(row["attempts"], 1);
  EXPECT_EQ(row["attempt_failures"], json::array());
  EXPECT_DOUBLE_EQ(row["ttft_s"].get<double>(), 0.25);
  EXPECT_DOUBLE_EQ(row["first_byte_s"].get<double>(), 0.5);
  // tpot = (last token - prefill completion) / (n - 1) = (0.5625 - 0.25) / 1.
  EXPECT_DOUBLE_EQ(row["tpot_s"].get<double>(), 0.3125);
  EXPECT_DOUBLE_EQ(row["duration_s"].get<double>(), 0.5625);
  EXPECT_EQ(row["output_tokens"], 2);

  EXPECT_EQ(Metric("narwhal_requests_total",
                   {{"api", "chat"}, {"door", "http"}, {"terminal", "completed"}}),
            1);
  EXPECT_EQ(Metric("narwhal_ttft_seconds"), 1);
  EXPECT_DOUBLE_EQ(nt::HistogramSum(registry_, "narwhal_ttft_seconds"), 0.25);
  EXPECT_DOUBLE_EQ(nt::HistogramSum(registry_, "narwhal_first_byte_seconds"), 0.5);
  EXPECT_EQ(Metric("narwhal_tpot_seconds"), 1);
  EXPECT_DOUBLE_EQ(nt::HistogramSum(registry_, "narwhal_tpot_seconds"), 0.3125);
  EXPECT_EQ(Metric("narwhal_decode_tokens_total"), 2);
  EXPECT_EQ(Metric("narwhal_inflight"), 0);
  ExpectNoReservations();
}

TEST_F(RouterTest, StreamingHoldsMetadataUntilTheFirstToken) {
  Start();
  fake_.QueueDecode(nt::DecodeStep::BlockAfter({nt::ChatRoleChunk(), nt::ChatChunk("")}));
  std::shared_ptr<nt::TestSink> channel = Submit(MakeRequest(true, Api::kChatCompletions));
  ASSERT_TRUE(fake_.WaitForBlocked(1));
  Chunk c;
  // Two metadata events reached the router; nothing is visible yet.
  EXPECT_EQ(channel->TryNext(&c), nt::TestSink::Pop::kEmpty);
  channel->Cancel();
  Result r = Collect(*channel);
  EXPECT_TRUE(r.chunks.empty());
  EXPECT_EQ(r.outcome.terminal, Terminal::kCancelled);
  EXPECT_FALSE(r.outcome.output_started);
}

TEST_F(RouterTest, B9_NonStreamingCompletionsAreAssembled) {
  Start();
  fake_.QueuePrefill(nt::PrefillStep::Ok(100ms));
  fake_.QueueDecode(nt::DecodeStep::Stream(
      {nt::CompletionChunk("hel"), nt::CompletionChunk("lo"), nt::CompletionChunk("!", "length")},
      50ms));
  std::string rid;
  Result r = Run(/*stream=*/false, Api::kCompletions, &rid);
  ASSERT_TRUE(r.ended);
  EXPECT_TRUE(r.chunks.empty());  // nothing relayed: the router assembles
  const Outcome& o = r.outcome;
  EXPECT_EQ(o.terminal, Terminal::kCompleted);
  EXPECT_FALSE(o.output_started);
  EXPECT_EQ(o.body["object"], "text_completion");
  EXPECT_EQ(o.body["choices"][0]["text"], "hello!");
  EXPECT_EQ(o.body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(o.body["id"], "cmpl-1");
  EXPECT_EQ(o.output_tokens, 3);
  ASSERT_TRUE(o.ttft_s && o.first_byte_s);
  EXPECT_NEAR(*o.ttft_s, 0.1, 1e-9);
  EXPECT_NEAR(*o.first_byte_s, 0.15, 1e-9);
  EXPECT_EQ(Row(rid)["stream"], false);
}

TEST_F(RouterTest, NonStreamingChatAssembledWithFinishReasonAndUsage) {
  Start();
  fake_.QueueDecode(nt::DecodeStep::Stream({nt::ChatRoleChunk(), nt::ChatChunk("Hel"),
                                            nt::ChatChunk("lo", "stop"), nt::UsageChunk(5, 2)}));
  Result r = Run(/*stream=*/false, Api::kChatCompletions);
  const Outcome& o = r.outcome;
  ASSERT_EQ(o.terminal, Terminal::kCompleted) << o.message;
  EXPECT_EQ(o.body["object"], "chat.completion");
  EXPECT_EQ(o.body["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(o.body["choices"][0]["message"]["content"], "Hello");
  EXPECT_EQ(o.body["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(o.body["usage"]["prompt_tokens"], 5);
  EXPECT_EQ(o.body["usage"]["completion_tokens"], 2);
  EXPECT_EQ(o.output_tokens, 2);
  EXPECT_EQ(o.prompt_tokens, 5);
  EXPECT_EQ(o.finish_reason, "stop");
}

// ---------------------------------------------------------------------------
// Placement (B5), handoff identity (B6), fresh ids (B8).

TEST_F(RouterTest, B5_DecodeAvoidsTheProducerWhenAnotherDecodeEngineExists) {
  settings_.engines = {Engine("e0", Role::kBoth), Engine("e1", Role::kBoth)};
  Start();
  std::vector<std::string> rids;
  for (int i = 0; i < 4; ++i) {
    std::string rid;
    ASSERT_EQ(Run(true, Api::kCompletions, &rid).outcome.terminal, Terminal::kCompleted);
    rids.push_back(rid);
  }
  const auto decodes = fake_.decode_calls();
  ASSERT_EQ(decodes.size(), 4u);
  for (const nt::DecodeCall& d : decodes) {
    EXPECT_FALSE(d.same_worker);
    EXPECT_NE(d.target.iid, d.handoff->producer_iid());
  }
  for (const std::string& rid : rids) EXPECT_EQ(Row(rid)["crossed"], true);
}

TEST_F(RouterTest, B5_SameWorkerDecodeWhenTheProducerIsTheOnlyDecodeEngine) {
  settings_.engines = {Engine("e0", Role::kBoth), Engine("p1", Role::kPrefill)};
  Start();
  std::string rid;
  // Whichever engine produces, e0 is the only one able to decode.
  for (int i = 0; i < 2; ++i)
    ASSERT_EQ(nt::HttpStatus(Run(true, Api::kCompletions, &rid).outcome), 200);
  const auto decodes = fake_.decode_calls();
  ASSERT_EQ(decodes.size(), 2u);
  bool saw_same_worker = false;
  for (const nt::DecodeCall& d : decodes) {
    EXPECT_EQ(d.target.iid, "e0");
    EXPECT_EQ(d.same_worker, d.handoff->producer_iid() == "e0");
    saw_same_worker = saw_same_worker || d.same_worker;
  }
  EXPECT_TRUE(saw_same_worker);
}

TEST_F(RouterTest, B5_SingleBothEngineServesBothLegs) {
  settings_.engines = {Engine("e0", Role::kBoth)};
  Start();
  std::string rid;
  ASSERT_EQ(Run(true, Api::kCompletions, &rid).outcome.terminal, Terminal::kCompleted);
  ASSERT_EQ(fake_.decode_calls().size(), 1u);
  EXPECT_TRUE(fake_.decode_calls()[0].same_worker);
  const json row = Row(rid);
  EXPECT_EQ(row["prefill_iid"], "e0");
  EXPECT_EQ(row["decode_iid"], "e0");
  EXPECT_EQ(row["crossed"], false);
}

TEST_F(RouterTest, Placement_SequentialRequestsShareEqualEngines) {
  // Equal engines share the load (placement.h: ties rotate). With one request
  // at a time every engine is idle at each pick, so only the rotation spreads.
  settings_.engines = {Engine("p0", Role::kPrefill), Engine("p1", Role::kPrefill),
                       Engine("d0", Role::kDecode), Engine("d1", Role::kDecode)};
  Start();
  for (int i = 0; i < 4; ++i) ASSERT_EQ(nt::HttpStatus(Run(true).outcome), 200);
  std::set<std::string> producers, consumers;
  for (const auto& p : fake_.prefill_calls()) producers.insert(p.target.iid);
  for (const auto& d : fake_.decode_calls()) consumers.insert(d.target.iid);
  EXPECT_EQ(producers, (std::set<std::string>{"p0", "p1"}));
  EXPECT_EQ(consumers, (std::set<std::string>{"d0", "d1"}));
}

TEST_F(RouterTest, B6_DecodeReceivesThePrefillResultUnchanged) {
  Start();
  Request req = MakeRequest(true);
  const json body = req.body;
  ASSERT_EQ(nt::HttpStatus(Run(std::move(req)).outcome), 200);
  const auto prefills = fake_.prefill_calls();
  const auto decodes = fake_.decode_calls();
  ASSERT_EQ(prefills.size(), 1u);
  ASSERT_EQ(decodes.size(), 1u);
  ASSERT_TRUE(prefills[0].result.has_value());
  const engines::PrefillResult& produced = *prefills[0].result;
  const engines::PrefillResult& received = *decodes[0].handoff;
  EXPECT_EQ(received.producer_iid(), "p0");
  EXPECT_EQ(received.producer_url(), "http://p0:8000");
  EXPECT_EQ(received.backend_request_id(), produced.backend_request_id());
  EXPECT_EQ(received.descriptor(), produced.descriptor());
  EXPECT_EQ(received.endpoint(), Api::kCompletions);
  // Both legs see the client body; leg edits are the adapter's job.
  EXPECT_EQ(prefills[0].body, body);
  EXPECT_EQ(decodes[0].body, body);
  EXPECT_TRUE(decodes[0].client_streams);
  EXPECT_TRUE(prefills[0].has_cancel_token);
  EXPECT_TRUE(decodes[0].has_cancel_token);
}

TEST_F(RouterTest, LegDeadlinesComeFromTheRequestAndPrefillTimeout) {
  settings_.serving.prefill_timeout_s = 2;
  Start();
  Request req = MakeRequest(true);
  const engines::MonoTime deadline = req.deadline;
  ASSERT_EQ(nt::HttpStatus(Run(std::move(req)).outcome), 200);
  const auto p = fake_.prefill_calls().at(0);
  const auto d = fake_.decode_calls().at(0);
  EXPECT_EQ(p.request_deadline, deadline);
  ASSERT_TRUE(p.leg_deadline.has_value());
  EXPECT_EQ(*p.leg_deadline, p.started + 2s);
  EXPECT_EQ(d.request_deadline, deadline);
}

TEST_F(RouterTest, PrefillTimeoutIs504PrefillAndTransient) {
  settings_.serving.prefill_timeout_s = 2;
  Start();
  fake_.QueuePrefill(nt::PrefillStep::Ok(3s));  // the watchdog ends it at 2 s
  std::string rid;
  Result r = Run(true, Api::kCompletions, &rid);
  EXPECT_EQ(nt::HttpStatus(r.outcome), 504);
  EXPECT_EQ(nt::ErrorTypeOf(r.outcome), ErrorType::kPrefill);
  const json row = Row(rid);
  EXPECT_EQ(row["reason"], "engine_timeout");
  EXPECT_EQ(row["attempt_failures"][0]["transient"], true);
  EXPECT_EQ(row["attempt_failures"][0]["retry_reason"], "attempt_limit");
}

TEST_F(RouterTest, B8_FreshBackendIdsPerAttemptAndPhaseAndANewPrefillPerRetry) {
  settings_.engines = {Engine("p0", Role::kPrefill), Engine("p1", Role::kPrefill),
                       Engine("d0", Role::kDecode), Engine("d1", Role::kDecode)};
  settings_.serving.max_attempts = 2;
  Start();
  fake_.QueueDecode(nt::DecodeStep::Fail(nt::FirstTokenTimeout()));
  Request req = MakeRequest(true);
  const std::string rid = req.rid;
  Result r = Run(std::move(req));
  ASSERT_EQ(r.outcome.terminal, Terminal::kCompleted) << r.outcome.message;

  const auto prefills = fake_.prefill_calls();
  const auto decodes = fake_.decode_calls();
  ASSERT_EQ(prefills.size(), 2u);
  ASSERT_EQ(decodes.size(), 2u);
  const std::set<std::string> ids = {prefills[0].backend_request_id, prefills[1].backend_request_id,
                                     decodes[0].backend_request_id, decodes[1].backend_request_id};
  EXPECT_EQ(ids.size(), 4u);
  for (const std::string& id : ids) EXPECT_THAT(id, StartsWith(rid));
  // Each attempt's decode receives that attempt's handoff; none is reused.
  for (size_t a = 0; a < 2; ++a) {
    ASSERT_TRUE(prefills[a].result.has_value());
    EXPECT_EQ(decodes[a].handoff->backend_request_id(), prefills[a].backend_request_id) << a;
    EXPECT_EQ(decodes[a].handoff->descriptor(), prefills[a].result->descriptor()) << a;
  }
  EXPECT_NE(decodes[1].handoff->descriptor(), decodes[0].handoff->descriptor());
  EXPECT_EQ(Row(rid)["attempts"], 2);
  EXPECT_EQ(Metric("narwhal_retry_attempts_total"), 1);
}

// ---------------------------------------------------------------------------
// B7: ownership, reservations, handoff age.

TEST_F(RouterTest, B7_ReservationsReleasedAfterSuccess) {
  Start();
  ASSERT_EQ(nt::HttpStatus(Run(true).outcome), 200);
  ExpectNoReservations();
}

TEST_F(RouterTest, B7_ReservationsHeldDuringLegsAndReleasedAfterCancel) {
  Start();
  fake_.QueueDecode(nt::DecodeStep::BlockAfter({}));
  std::shared_ptr<nt::TestSink> channel = Submit(MakeRequest(true));
  ASSERT_TRUE(fake_.WaitForBlocked(1));
  // The decode slot is held while its leg runs; the prefill slot is back.
  EXPECT_EQ(Snap("d0").inflight_decode, 1);
  EXPECT_EQ(Snap("p0").inflight_prefill, 0);
  EXPECT_EQ(Metric("narwhal_engine_inflight", {{"iid", "d0"}, {"phase", "decode"}}), 1);
  EXPECT_EQ(Metric("narwhal_inflight"), 1);
  channel->Cancel();
  EXPECT_EQ(Collect(*channel).outcome.terminal, Terminal::kCancelled);
  ExpectNoReservations();
  EXPECT_EQ(Metric("narwhal_inflight"), 0);
}

TEST_F(RouterTest, B7_ReservationsReleasedAfterFailure) {
  Start();
  fake_.QueueDecode(nt::DecodeStep::Fail(nt::EngineStatusFailure(500)));
  EXPECT_EQ(nt::HttpStatus(Run(true).outcome), 502);
  fake_.QueuePrefill(nt::PrefillStep::Fail(nt::ConnectRefused()));
  EXPECT_EQ(nt::HttpStatus(Run(true).outcome), 502);
  ExpectNoReservations();
}

TEST_F(RouterTest, B7_ReservationsReleasedAfterDeadline) {
  settings_.serving.request_timeout_s = 1;
  Start();
  fake_.QueueDecode(nt::DecodeStep::Stream({nt::CompletionChunk("a")}, 2s));
  std::string rid;
  Result r = Run(true, Api::kCompletions, &rid);
  EXPECT_EQ(r.outcome.terminal, Terminal::kExpired);
  EXPECT_EQ(nt::HttpStatus(r.outcome), 504);
  EXPECT_EQ(nt::ErrorTypeOf(r.outcome), ErrorType::kRequestExpired);
  EXPECT_EQ(Row(rid)["reason"], "deadline");
  ExpectNoReservations();
  // The request's own deadline is no evidence against the engine.
  EXPECT_EQ(Streak("d0", "timeout"), 0);
  EXPECT_EQ(Streak("d0", "stream"), 0);
}

TEST_F(RouterTest, RequestAlreadyExpiredNeverReachesAnEngine) {
  Start();
  Request req = MakeRequest(true);
  req.deadline = clock_.Now();
  Result r = Run(std::move(req));
  EXPECT_EQ(r.outcome.terminal, Terminal::kExpired);
  EXPECT_EQ(nt::HttpStatus(r.outcome), 504);
  EXPECT_EQ(nt::ErrorTypeOf(r.outcome), ErrorType::kRequestExpired);
  EXPECT_TRUE(fake_.prefill_calls().empty());
}

TEST_F(RouterTest, B7_HandoffExpiredWhenThePrefillOutlivesTheHandoffTimeout) {
  settings_.serving.handoff_timeout_s = 1;
  Start();
  fake_.QueuePrefill(nt::PrefillStep::Ok(1500ms));
  std::string rid;
  Result r = Run(true, Api::kCompletions, &rid);
  EXPECT_EQ(nt::HttpStatus(r.outcome), 504);
  EXPECT_EQ(nt::ErrorTypeOf(r.outcome), ErrorType::kHandoffExpired);
  EXPECT_EQ(r.outcome.terminal, Terminal::kExpired);
  EXPECT_EQ(nt::ReasonOf(r.outcome), "handoff");
  EXPECT_THAT(r.outcome.message, HasSubstr("KV handoff expired"));
  // The decode engine received no client decode (only, in the background,
  // the release of the abandoned handoff: tests/router/handoff_release_test).
  EXPECT_TRUE(ClientDecodes().empty());
  const json row = Row(rid);
  EXPECT_EQ(row["terminal"], "expired");
  EXPECT_EQ(row["reason"], "handoff");
  EXPECT_EQ(row["error_type"], "handoff_expired");
  EXPECT_EQ(row["attempt_failures"][0]["transient"], true);
  EXPECT_EQ(Metric("narwhal_handoff_rejected_total", {{"reason", "expired"}}), 1);
  ExpectNoReservations();
}

TEST_F(RouterTest, B7_HandoffAgeStartsWhenTheProducerLegStarts) {
  settings_.serving.handoff_timeout_s = 1;
  Start();
  Request req = MakeRequest(true);
  clock_.Advance(5s);  // time before the prefill leg does not age the handoff
  fake_.QueuePrefill(nt::PrefillStep::Ok(500ms));
  Result r = Run(std::move(req));
  EXPECT_EQ(r.outcome.terminal, Terminal::kCompleted) << r.outcome.message;
  ASSERT_TRUE(r.outcome.ttft_s.has_value());
  EXPECT_DOUBLE_EQ(*r.outcome.ttft_s, 5.5);  // B9: from arrival
}

TEST_F(RouterTest, B7_HandoffExpiryIsRetriedWithAFreshPrefill) {
  // Two producers, one consumer: the handoff aged on a slow producer; the
  // idle decode engine did nothing wrong and must stay available.
  settings_.engines = {Engine("p0", Role::kPrefill), Engine("p1", Role::kPrefill),
                       Engine("d0", Role::kDecode)};
  settings_.serving.handoff_timeout_s = 1;
  settings_.serving.max_attempts = 2;
  Start();
  fake_.QueuePrefill(nt::PrefillStep::Ok(1500ms));
  std::string rid;
  Result r = Run(true, Api::kCompletions, &rid);
  EXPECT_EQ(r.outcome.terminal, Terminal::kCompleted) << r.outcome.message;
  const json row = Row(rid);
  EXPECT_EQ(row["attempts"], 2);
  ASSERT_EQ(row["attempt_failures"].size(), 1u);
  EXPECT_EQ(row["attempt_failures"][0]["reason"], "handoff");
  EXPECT_EQ(row["attempt_failures"][0]["retry_reason"], "allowed");
  const auto prefills = fake_.prefill_calls();
  ASSERT_EQ(prefills.size(), 2u);
  EXPECT_NE(prefills[0].target.iid, prefills[1].target.iid);
  // One client decode (the aged handoff's release aside), of the fresh one.
  const std::vector<nt::DecodeCall> decodes = ClientDecodes();
  ASSERT_EQ(decodes.size(), 1u);
  EXPECT_EQ(decodes[0].handoff->backend_request_id(), prefills[1].backend_request_id);
}

// ---------------------------------------------------------------------------
// B10/B11: failure → status and type.

struct MappingCase {
  std::string name;
  bool in_prefill;
  engines::EngineFailure failure;
  std::string stream_payload;  // decode: an in-stream event instead of `failure`
  int status;
  ErrorType type;
  Terminal terminal;
  std::string reason;
  std::string message_prefix;
};

class FailureMappingTest : public RouterTest, public ::testing::WithParamInterface<MappingCase> {};

TEST_P(FailureMappingTest, B10_FailureMapsToStatusAndType) {
  const MappingCase& c = GetParam();
  Start();
  if (c.in_prefill) {
    fake_.QueuePrefill(nt::PrefillStep::Fail(c.failure));
  } else if (!c.stream_payload.empty()) {
    fake_.QueueDecode(nt::DecodeStep::Stream({c.stream_payload}));
  } else {
    fake_.QueueDecode(nt::DecodeStep::Fail(c.failure));
  }
  std::string rid;
  Result r = Run(/*stream=*/true, Api::kCompletions, &rid);
  const Outcome& o = r.outcome;
  EXPECT_EQ(nt::HttpStatus(o), c.status);
  EXPECT_EQ(nt::ErrorTypeOf(o), c.type);
  EXPECT_EQ(o.terminal, c.terminal);
  EXPECT_EQ(nt::ReasonOf(o), c.reason);
  EXPECT_FALSE(o.output_started);
  EXPECT_THAT(o.message, StartsWith(c.message_prefix));
  const json row = Row(rid);
  EXPECT_EQ(row["status"], c.status);
  EXPECT_EQ(row["error_type"], std::string(ErrorTypeName(c.type)));
  EXPECT_EQ(row["terminal"], std::string(TerminalName(c.terminal)));
  EXPECT_EQ(row["attempt_failures"][0]["phase"], c.in_prefill ? "prefill" : "decode");
  ExpectNoReservations();
}

INSTANTIATE_TEST_SUITE_P(
    Mapping, FailureMappingTest,
    ::testing::Values(
        MappingCase{"PrefillEngine400", true, nt::EngineStatusFailure(400, "prompt too long"), "",
                    400, ErrorType::kInvalidRequest, Terminal::kFailed, "engine_rejected",
                    "prompt too long"},
        MappingCase{"PrefillEngine503", true, nt::EngineStatusFailure(503), "", 502,
                    ErrorType::kPrefill, Terminal::kFailed, "engine_error",
                    "engine returned HTTP 503"},
        MappingCase{"PrefillEngine504", true, nt::EngineStatusFailure(504), "", 504,
                    ErrorType::kPrefill, Terminal::kFailed, "engine_timeout",
                    "engine returned HTTP 504"},
        MappingCase{"PrefillEngine408", true, nt::EngineStatusFailure(408), "", 504,
                    ErrorType::kPrefill, Terminal::kFailed, "engine_overloaded",
                    "engine returned HTTP 408"},
        MappingCase{"PrefillConnectRefused", true, nt::ConnectRefused(), "", 502,
                    ErrorType::kPrefill, Terminal::kFailed, "engine_unreachable",
                    "engine unreachable"},
        MappingCase{"PrefillNoHandoff", true, nt::NoHandoff(), "", 502, ErrorType::kPrefill,
                    Terminal::kFailed, "invalid_response", "no handoff:"},
        MappingCase{"DecodeEngine413", false, nt::EngineStatusFailure(413, "too big"), "", 413,
                    ErrorType::kInvalidRequest, Terminal::kFailed, "engine_rejected", "too big"},
        MappingCase{"DecodeEngine500", false, nt::EngineStatusFailure(500), "", 502,
                    ErrorType::kDecode, Terminal::kFailed, "engine_error",
                    "engine returned HTTP 500"},
        MappingCase{"DecodeFirstTokenTimeout", false, nt::FirstTokenTimeout(), "", 504,
                    ErrorType::kDecode, Terminal::kFailed, "engine_timeout",
                    "no first token within"},
        MappingCase{"DecodeMissingDone", false, nt::MissingDone(), "", 502, ErrorType::kDecode,
                    Terminal::kFailed, "engine_error", "stream ended before the [DONE] terminator"},
        MappingCase{"B11_DecodeDoneBeforeAnyToken",
                    false,
                    {},
                    nt::kDone,
                    502,
                    ErrorType::kDecode,
                    Terminal::kFailed,
                    "engine_error",
                    "stream ended with [DONE] before any token arrived"},
        MappingCase{"B11_DecodeInStreamErrorKeepsItsCode",
                    false,
                    {},
                    nt::StreamError(503, "overloaded"),
                    503,
                    ErrorType::kDecode,
                    Terminal::kFailed,
                    "engine_error",
                    "engine stream error 503"},
        MappingCase{"DecodeRequestDeadline", false, nt::RequestDeadline(), "", 504,
                    ErrorType::kRequestExpired, Terminal::kExpired, "deadline",
                    "request deadline passed"}),
    [](const ::testing::TestParamInfo<MappingCase>& info) { return info.param.name; });

// ---------------------------------------------------------------------------
// B14 retries.

TEST_F(RouterTest, B14_DefaultIsOneAttemptWithoutRetry) {
  settings_.engines = {Engine("p0", Role::kPrefill), Engine("p1", Role::kPrefill),
                       Engine("d0", Role::kDecode), Engine("d1", Role::kDecode)};
  Start();
  ASSERT_EQ(settings_.serving.max_attempts, 1);
  fake_.QueueDecode(nt::DecodeStep::Fail(nt::FirstTokenTimeout()));
  std::string rid;
  Result r = Run(true, Api::kCompletions, &rid);
  EXPECT_EQ(nt::HttpStatus(r.outcome), 504);
  EXPECT_EQ(fake_.prefill_calls().size(), 1u);
  const json row = Row(rid);
  EXPECT_EQ(row["attempts"], 1);
  ASSERT_EQ(row["attempt_failures"].size(), 1u);
  const json& af = row["attempt_failures"][0];
  EXPECT_EQ(af["attempt"], 1);
  EXPECT_EQ(af["phase"], "decode");
  EXPECT_EQ(af["iid"], fake_.decode_calls()[0].target.iid);
  EXPECT_EQ(af["reason"], "engine_timeout");
  EXPECT_EQ(af["status"], 504);
  EXPECT_EQ(af["transient"], true);
  EXPECT_EQ(af["output_started"], false);
  EXPECT_EQ(af["retry_scheduled"], false);
  EXPECT_EQ(af["retry_reason"], "attempt_limit");
  EXPECT_EQ(
      Metric("narwhal_attempt_failures_total", {{"phase", "decode"}, {"reason", "engine_timeout"}}),
      1);
  // The series names the engine that failed.
  EXPECT_EQ(Metric("narwhal_attempt_failures_total", {{"phase", "decode"},
                                                      {"reason", "engine_timeout"},
                                                      {"iid", fake_.decode_calls()[0].target.iid}}),
            1);
  EXPECT_EQ(Metric("narwhal_retry_attempts_total"), 0);
}

TEST_F(RouterTest, B14_TransientPrefillFailureRetriedOnAnotherProducer) {
  settings_.engines = {Engine("p0", Role::kPrefill), Engine("p1", Role::kPrefill),
                       Engine("d0", Role::kDecode)};
  settings_.serving.max_attempts = 2;
  Start();
  fake_.QueuePrefill(nt::PrefillStep::Fail(nt::EngineStatusFailure(503)));
  std::string rid;
  Result r = Run(true, Api::kCompletions, &rid);
  ASSERT_EQ(r.outcome.terminal, Terminal::kCompleted) << r.outcome.message;
  const auto prefills = fake_.prefill_calls();
  ASSERT_EQ(prefills.size(), 2u);
  EXPECT_NE(prefills[1].target.iid, prefills[0].target.iid);
  const json row = Row(rid);
  EXPECT_EQ(row["attempts"], 2);
  EXPECT_EQ(row["prefill_iid"], prefills[1].target.iid);
  EXPECT_EQ(row["attempt_failures"][0]["retry_scheduled"], true);
  EXPECT_EQ(row["attempt_failures"][0]["retry_reason"], "allowed");
  EXPECT_EQ(row["attempt_failures"][0]["phase"], "prefill");
}

TEST_F(RouterTest, B14_FailedDecodeExcludesItsEngineAndThatAttemptsProducer) {
  settings_.engines = {Engine("p0", Role::kPrefill), Engine("p1", Role::kPrefill),
                       Engine("d0", Role::kDecode), Engine("d1", Role::kDecode)};
  settings_.serving.max_attempts = 2;
  Start();
  fake_.QueueDecode(nt::DecodeStep::Fail(nt::MissingDone()));
  Result r = Run(true);
  ASSERT_EQ(r.outcome.terminal, Terminal::kCompleted) << r.outcome.message;
  const auto prefills = fake_.prefill_calls();
  const auto decodes = fake_.decode_calls();
  ASSERT_EQ(prefills.size(), 2u);
  ASSERT_EQ(decodes.size(), 2u);
  EXPECT_NE(decodes[1].target.iid, decodes[0].target.iid);
  EXPECT_NE(prefills[1].target.iid, prefills[0].target.iid);
}

TEST_F(RouterTest, B14_FailedPrefillExcludesThatProducer) {
  settings_.serving.max_attempts = 2;  // p0 + d0: no other producer
  Start();
  fake_.QueuePrefill(nt::PrefillStep::Fail(nt::EngineStatusFailure(503)));
  std::string rid;
  Result r = Run(true, Api::kCompletions, &rid);
  EXPECT_EQ(nt::HttpStatus(r.outcome), 502);
  EXPECT_EQ(nt::ErrorTypeOf(r.outcome), ErrorType::kPrefill);
  EXPECT_EQ(fake_.prefill_calls().size(), 1u);
  EXPECT_EQ(Row(rid)["attempt_failures"][0]["retry_reason"], "no_engine");
}

TEST_F(RouterTest, B14_FailedDecodeAlsoExcludesThatAttemptsProducer) {
  // Another decode engine exists, but the only producer made the failed
  // attempt's handoff: no retry.
  settings_.engines = {Engine("p0", Role::kPrefill), Engine("d0", Role::kDecode),
                       Engine("d1", Role::kDecode)};
  settings_.serving.max_attempts = 2;
  Start();
  fake_.QueueDecode(nt::DecodeStep::Fail(nt::EngineStatusFailure(503)));
  std::string rid;
  Result r = Run(true, Api::kCompletions, &rid);
  EXPECT_EQ(nt::HttpStatus(r.outcome), 502);
  EXPECT_EQ(nt::ErrorTypeOf(r.outcome), ErrorType::kDecode);
  EXPECT_EQ(fake_.prefill_calls().size(), 1u);
  EXPECT_EQ(fake_.decode_calls().size(), 1u);
  EXPECT_EQ(Row(rid)["attempt_failures"][0]["retry_reason"], "no_engine");
}

TEST_F(RouterTest, B14_NonTransientFailureIsNotRetried) {
  settings_.engines = {Engine("p0", Role::kPrefill), Engine("p1", Role::kPrefill),
                       Engine("d0", Role::kDecode)};
  settings_.serving.max_attempts = 3;
  Start();
  fake_.QueuePrefill(nt::PrefillStep::Fail(nt::EngineStatusFailure(400, "bad prompt")));
  std::string rid;
  Result r = Run(true, Api::kCompletions, &rid);
  EXPECT_EQ(nt::HttpStatus(r.outcome), 400);
  EXPECT_EQ(fake_.prefill_calls().size(), 1u);
  EXPECT_EQ(Row(rid)["attempt_failures"][0]["retry_reason"], "non_transient");
}

TEST_F(RouterTest, B16_StreamingFailureAfterOutputStartedIsNeverRetried) {
  settings_.engines = {Engine("p0", Role::kPrefill), Engine("p1", Role::kPrefill),
                       Engine("d0", Role::kDecode), Engine("d1", Role::kDecode)};
  settings_.serving.max_attempts = 3;
  Start();
  fake_.QueueDecode(
      nt::DecodeStep::FailAfter({nt::ChatRoleChunk(), nt::ChatChunk("a")}, nt::ReadTimeout()));
  std::string rid;
  Result r = Run(true, Api::kChatCompletions, &rid);
  ASSERT_EQ(r.chunks.size(), 2u);  // the held role chunk, then "a"
  EXPECT_EQ(r.chunks[1].text, "a");
  const Outcome& o = r.outcome;
  EXPECT_TRUE(o.output_started);
  EXPECT_EQ(o.terminal, Terminal::kFailed);
  EXPECT_EQ(nt::HttpStatus(o), 504);  // the terminal event's code
  EXPECT_EQ(nt::ErrorTypeOf(o), ErrorType::kDecode);
  EXPECT_THAT(o.message, StartsWith("engine went silent between tokens"));
  EXPECT_EQ(fake_.prefill_calls().size(), 1u);
  EXPECT_EQ(fake_.decode_calls().size(), 1u);
  const json row = Row(rid);
  EXPECT_EQ(row["status"], 504);
  EXPECT_EQ(row["output_started"], true);
  EXPECT_EQ(row["attempt_failures"][0]["output_started"], true);
  EXPECT_EQ(row["attempt_failures"][0]["retry_reason"], "output_started");
}

TEST_F(RouterTest, B16_DeadlineAfterCommitIsRequestExpired) {
  Start();
  fake_.QueueDecode(nt::DecodeStep::FailAfter({nt::CompletionChunk("a")}, nt::RequestDeadline()));
  std::string rid;
  Result r = Run(true, Api::kCompletions, &rid);
  ASSERT_EQ(r.chunks.size(), 1u);
  EXPECT_TRUE(r.outcome.output_started);
  EXPECT_EQ(nt::HttpStatus(r.outcome), 504);
  EXPECT_EQ(nt::ErrorTypeOf(r.outcome), ErrorType::kRequestExpired);
  EXPECT_EQ(r.outcome.terminal, Terminal::kExpired);
  EXPECT_EQ(Row(rid)["status"], 504);
}

TEST_F(RouterTest, B14_NonStreamingRetriedAfterAMidStreamFailure) {
  settings_.engines = {Engine("p0", Role::kPrefill), Engine("p1", Role::kPrefill),
                       Engine("d0", Role::kDecode), Engine("d1", Role::kDecode)};
  settings_.serving.max_attempts = 2;
  Start();
  fake_.QueueDecode(nt::DecodeStep::FailAfter({nt::CompletionChunk("stale ")}, nt::ReadTimeout()));
  std::string rid;
  Result r = Run(false, Api::kCompletions, &rid);
  ASSERT_EQ(r.outcome.terminal, Terminal::kCompleted) << r.outcome.message;
  // The failed attempt's partial output is discarded.
  EXPECT_EQ(r.outcome.body["choices"][0]["text"], "hello world");
  EXPECT_EQ(Row(rid)["attempt_failures"][0]["output_started"], false);
  EXPECT_EQ(Row(rid)["attempt_failures"][0]["retry_reason"], "allowed");
}

TEST_F(RouterTest, B14_StreamingMetadataBeforeAFailureIsNotOutput) {
  settings_.engines = {Engine("p0", Role::kPrefill), Engine("p1", Role::kPrefill),
                       Engine("d0", Role::kDecode), Engine("d1", Role::kDecode)};
  settings_.serving.max_attempts = 2;
  Start();
  fake_.QueueDecode(nt::DecodeStep::FailAfter({nt::ChatRoleChunk()}, nt::FirstTokenTimeout()));
  Result r = Run(true, Api::kChatCompletions);
  ASSERT_EQ(r.outcome.terminal, Terminal::kCompleted) << r.outcome.message;
  // Only the second attempt's events reach the client: role, hello, world.
  ASSERT_EQ(r.chunks.size(), 3u);
  EXPECT_EQ(r.chunks[0].data, nt::ChatRoleChunk());
  EXPECT_EQ(r.chunks[1].text, "hello");
  EXPECT_EQ(r.chunks[2].text, " world");
}

TEST_F(RouterTest, B14_NoRetryWhenTheBackoffWouldPassTheDeadline) {
  settings_.engines = {Engine("p0", Role::kPrefill), Engine("p1", Role::kPrefill),
                       Engine("d0", Role::kDecode)};
  settings_.serving.max_attempts = 2;
  settings_.serving.retry_base_s = 1;
  settings_.serving.retry_cap_s = 1;
  Start();
  Request req = MakeRequest(true);
  req.deadline = req.arrived + 10ms;
  // Fails 1 µs before the deadline: any backoff above 1 µs passes it.
  fake_.QueuePrefill(nt::PrefillStep::Fail(nt::ConnectionLost(), 10ms - 1us));
  const std::string rid = req.rid;
  Result r = Run(std::move(req));
  EXPECT_EQ(nt::HttpStatus(r.outcome), 502);  // the failed attempt's own status
  EXPECT_EQ(nt::ErrorTypeOf(r.outcome), ErrorType::kPrefill);
  EXPECT_EQ(fake_.prefill_calls().size(), 1u);
  EXPECT_EQ(Row(rid)["attempt_failures"][0]["retry_reason"], "original_deadline");
  EXPECT_EQ(router_->retry_budget().credits(), settings_.serving.retry_budget);
}

// A refused connect reached no engine: it fails over once, at once, on
// another engine, outside max_attempts and the shared budget.
TEST_F(RouterTest, B14_RefusedConnectFailsOverOnceWithoutARetryCredit) {
  settings_.engines = {Engine("p0", Role::kPrefill), Engine("p1", Role::kPrefill),
                       Engine("d0", Role::kDecode)};
  settings_.serving.retry_budget = 0;  // no credit: a real retry could not happen
  Start();
  fake_.QueuePrefill(nt::PrefillStep::Fail(nt::ConnectRefused()));
  std::string rid;
  Result r = Run(true, Api::kCompletions, &rid);
  EXPECT_EQ(nt::HttpStatus(r.outcome), 200);
  ASSERT_EQ(fake_.prefill_calls().size(), 2u);
  EXPECT_NE(fake_.prefill_calls()[0].target.iid, fake_.prefill_calls()[1].target.iid);
  // At once: no backoff.
  EXPECT_EQ(fake_.prefill_calls()[1].started, fake_.prefill_calls()[0].started);
  const json row = Row(rid);
  EXPECT_EQ(row["attempts"], 2);
  ASSERT_EQ(row["attempt_failures"].size(), 1u);
  EXPECT_EQ(row["attempt_failures"][0]["retry_reason"], "connect_failover");
  EXPECT_EQ(row["attempt_failures"][0]["retry_scheduled"], true);
  EXPECT_EQ(router_->retry_budget().credits(), 0);
}

TEST_F(RouterTest, B14_RefusedDecodeConnectFailsOverToAnotherConsumer) {
  settings_.engines = {Engine("p0", Role::kPrefill), Engine("p1", Role::kPrefill),
                       Engine("d0", Role::kDecode), Engine("d1", Role::kDecode)};
  Start();
  fake_.QueueDecode(nt::DecodeStep::Fail(nt::ConnectRefused()));
  std::string rid;
  Result r = Run(true, Api::kCompletions, &rid);
  EXPECT_EQ(nt::HttpStatus(r.outcome), 200);
  ASSERT_EQ(fake_.decode_calls().size(), 2u);
  EXPECT_NE(fake_.decode_calls()[0].target.iid, fake_.decode_calls()[1].target.iid);
  EXPECT_EQ(Row(rid)["attempt_failures"][0]["retry_reason"], "connect_failover");
}

TEST_F(RouterTest, B14_OnlyOneFailoverAndItSpendsNoAttempt) {
  settings_.engines = {Engine("p0", Role::kPrefill), Engine("p1", Role::kPrefill),
                       Engine("p2", Role::kPrefill), Engine("d0", Role::kDecode)};
  Start();  // max_attempts 1
  fake_.QueuePrefill(nt::PrefillStep::Fail(nt::ConnectRefused()));
  fake_.QueuePrefill(nt::PrefillStep::Fail(nt::ConnectRefused()));
  std::string rid;
  Result r = Run(true, Api::kCompletions, &rid);
  EXPECT_EQ(nt::HttpStatus(r.outcome), 502);
  EXPECT_EQ(fake_.prefill_calls().size(), 2u);  // p2 is never tried
  const json row = Row(rid);
  ASSERT_EQ(row["attempt_failures"].size(), 2u);
  EXPECT_EQ(row["attempt_failures"][0]["retry_reason"], "connect_failover");
  EXPECT_EQ(row["attempt_failures"][1]["retry_reason"], "attempt_limit");
}

TEST_F(RouterTest, B14_AFailoverLeavesTheConfiguredRetriesIntact) {
  settings_.engines = {Engine("p0", Role::kPrefill), Engine("p1", Role::kPrefill),
                       Engine("p2", Role::kPrefill), Engine("d0", Role::kDecode)};
  settings_.serving.max_attempts = 2;
  Start();
  fake_.QueuePrefill(nt::PrefillStep::Fail(nt::ConnectRefused()));
  fake_.QueuePrefill(nt::PrefillStep::Fail(nt::ConnectionLost()));
  std::string rid;
  Result r = Run(true, Api::kCompletions, &rid);
  EXPECT_EQ(nt::HttpStatus(r.outcome), 200);
  EXPECT_EQ(fake_.prefill_calls().size(), 3u);
  const json row = Row(rid);
  EXPECT_EQ(row["attempt_failures"][0]["retry_reason"], "connect_failover");
  EXPECT_EQ(row["attempt_failures"][1]["retry_reason"], "allowed");
}

TEST_F(RouterTest, B14_AFailureThatReachedTheEngineIsNoFailover) {
  settings_.engines = {Engine("p0", Role::kPrefill), Engine("p1", Role::kPrefill),
                       Engine("d0", Role::kDecode)};
  Start();  // max_attempts 1
  fake_.QueuePrefill(nt::PrefillStep::Fail(nt::ConnectionLost()));
  std::string rid;
  EXPECT_EQ(nt::HttpStatus(Run(true, Api::kCompletions, &rid).outcome), 502);
  EXPECT_EQ(fake_.prefill_calls().size(), 1u);
  EXPECT_EQ(Row(rid)["attempt_failures"][0]["retry_reason"], "attempt_limit");
}

TEST_F(RouterTest, B14_SharedBudgetDeniesRetriesAndReplenishesPerSuccess) {
  settings_.engines = {Engine("p0", Role::kPrefill), Engine("p1", Role::kPrefill),
                       Engine("d0", Role::kDecode)};
  settings_.serving.max_attempts = 2;
  settings_.serving.retry_budget = 1;
  settings_.serving.retry_replenish = 0.1;
  Start();
  EXPECT_EQ(Metric("narwhal_retry_credits"), 1);

  // 1: retried with the only credit; its success adds 0.1 back.
  fake_.QueuePrefill(nt::PrefillStep::Fail(nt::ConnectionLost()));
  ASSERT_EQ(Run(true).outcome.terminal, Terminal::kCompleted);
  EXPECT_NEAR(router_->retry_budget().credits(), 0.1, 1e-9);
  EXPECT_EQ(Metric("narwhal_retry_attempts_total"), 1);

  // 2: no whole credit left: denied, ends with the failed attempt's status.
  fake_.QueuePrefill(nt::PrefillStep::Fail(nt::ConnectionLost()));
  std::string rid;
  Result denied = Run(true, Api::kCompletions, &rid);
  EXPECT_EQ(nt::HttpStatus(denied.outcome), 502);
  EXPECT_EQ(nt::ErrorTypeOf(denied.outcome), ErrorType::kPrefill);
  EXPECT_EQ(Row(rid)["attempt_failures"][0]["retry_reason"], "shared_budget");
  EXPECT_EQ(Row(rid)["attempt_failures"][0]["retry_scheduled"], false);
  EXPECT_EQ(Metric("narwhal_retry_denied_total"), 1);

  // Nine successes replenish 0.9: 0.1 + 0.9 makes a whole credit again.
  for (int i = 0; i < 9; ++i) ASSERT_EQ(nt::HttpStatus(Run(true).outcome), 200);
  EXPECT_NEAR(Metric("narwhal_retry_credits"), 1.0, 1e-9);
  fake_.QueuePrefill(nt::PrefillStep::Fail(nt::ConnectionLost()));
  EXPECT_EQ(Run(true).outcome.terminal, Terminal::kCompleted);
  EXPECT_EQ(Metric("narwhal_retry_attempts_total"), 2);
  EXPECT_EQ(Metric("narwhal_retry_denied_total"), 1);
}

TEST_F(RouterTest, B14_CreditRefundedWhenTheRetryIsCancelledBeforeDispatch) {
  settings_.engines = {Engine("p0", Role::kPrefill), Engine("p1", Role::kPrefill),
                       Engine("d0", Role::kDecode)};
  settings_.serving.max_attempts = 2;
  settings_.serving.retry_budget = 1;
  Start();
  std::promise<std::shared_ptr<nt::TestSink>> channel_promise;
  std::shared_future<std::shared_ptr<nt::TestSink>> channel_future =
      channel_promise.get_future().share();
  std::atomic<double> credits_during_backoff{-1};
  clock_.SetSleepHook([&](nt::Duration) {
    credits_during_backoff = router_->retry_budget().credits();
    // The client goes away during the backoff.
    if (channel_future.wait_for(10s) == std::future_status::ready) channel_future.get()->Cancel();
  });
  fake_.QueuePrefill(nt::PrefillStep::Fail(nt::ConnectionLost()));
  Request req = MakeRequest(true);
  const std::string rid = req.rid;
  std::shared_ptr<nt::TestSink> channel = Submit(std::move(req));
  channel_promise.set_value(channel);
  Result r = Collect(*channel);
  EXPECT_EQ(r.outcome.terminal, Terminal::kCancelled);
  EXPECT_EQ(credits_during_backoff.load(), 0);      // reserved when scheduled
  EXPECT_EQ(router_->retry_budget().credits(), 1);  // returned: never dispatched
  EXPECT_EQ(fake_.prefill_calls().size(), 1u);
  const json row = Row(rid);
  EXPECT_EQ(row["terminal"], "cancelled");
  EXPECT_TRUE(row["status"].is_null());
  ExpectNoReservations();
  clock_.SetSleepHook(nullptr);
}

TEST_F(RouterTest, B14_BackoffIsFullJitterWithinTheDoublingCeiling) {
  settings_.engines = {Engine("p0", Role::kPrefill), Engine("p1", Role::kPrefill),
                       Engine("p2", Role::kPrefill), Engine("d0", Role::kDecode)};
  settings_.serving.max_attempts = 3;
  settings_.serving.retry_base_s = 0.5;
  settings_.serving.retry_cap_s = 0.75;
  settings_.serving.retry_budget = 100;
  Start();
  constexpr int kRequests = 20;
  for (int i = 0; i < kRequests; ++i) {
    fake_.QueuePrefill(nt::PrefillStep::Fail(nt::ConnectionLost()));
    fake_.QueuePrefill(nt::PrefillStep::Fail(nt::ConnectionLost()));
    Result r = Run(true);
    ASSERT_EQ(r.outcome.terminal, Terminal::kCompleted) << i << ": " << r.outcome.message;
  }
  const auto sleeps = clock_.sleeps();
  ASSERT_EQ(sleeps.size(), 2u * kRequests);
  double max_first = 0, max_second = 0;
  for (int i = 0; i < kRequests; ++i) {
    const double first = Seconds(sleeps[2 * i]);
    const double second = Seconds(sleeps[2 * i + 1]);
    // After failed attempt n: uniform in [0, min(cap, base * 2^(n-1))].
    EXPECT_GE(first, 0);
    EXPECT_LE(first, 0.5);
    EXPECT_GE(second, 0);
    EXPECT_LE(second, 0.75);
    max_first = std::max(max_first, first);
    max_second = std::max(max_second, second);
  }
  EXPECT_GT(max_first, 0.25);  // jittered, not always zero
  EXPECT_GT(max_second, 0.5);  // the ceiling doubled (capped at 0.75)
}

TEST_F(RouterTest, NoPrefillStartsWithoutAPlaceableConsumer) {
  Start();
  ASSERT_TRUE(fleet_->admin().Eject("d0", "operator test").ok());
  std::string rid;
  Result r = Run(true, Api::kCompletions, &rid);
  EXPECT_EQ(nt::HttpStatus(r.outcome), 503);
  EXPECT_EQ(nt::ErrorTypeOf(r.outcome), ErrorType::kBackendUnavailable);
  EXPECT_TRUE(fake_.prefill_calls().empty()) << "the handoff would have been abandoned";
  EXPECT_EQ(Row(rid)["reason"], "no_engine");
  // Back in placement, the same request runs both legs.
  ASSERT_TRUE(fleet_->admin().Readmit("d0", "operator test").ok());
  r = Run(true);
  EXPECT_EQ(nt::HttpStatus(r.outcome), 200);
  EXPECT_EQ(fake_.prefill_calls().size(), 1u);
}

TEST_F(RouterTest, B14_NoEngineLeftEndsWithTheOriginalFailure) {
  settings_.serving.max_attempts = 2;  // p0 + d0 only
  Start();
  fake_.QueueDecode(nt::DecodeStep::Fail(nt::FirstTokenTimeout()));
  std::string rid;
  Result r = Run(true, Api::kCompletions, &rid);
  EXPECT_EQ(nt::HttpStatus(r.outcome), 504);
  EXPECT_EQ(nt::ErrorTypeOf(r.outcome), ErrorType::kDecode);
  EXPECT_EQ(fake_.prefill_calls().size(), 1u);
  EXPECT_EQ(Row(rid)["attempt_failures"][0]["retry_reason"], "no_engine");
  EXPECT_EQ(router_->retry_budget().credits(), settings_.serving.retry_budget);
}

// ---------------------------------------------------------------------------
// B15 quarantine.

TEST_F(RouterTest, B15_FailedEngineLeavesPlacementUntilTheQuarantineExpires) {
  settings_.engines = {Engine("p0", Role::kPrefill), Engine("p1", Role::kPrefill),
                       Engine("d0", Role::kDecode)};
  settings_.recovery.failure_quarantine_s = 5;
  Start();
  fake_.QueuePrefill(nt::PrefillStep::Fail(nt::ConnectionLost()));
  EXPECT_EQ(nt::HttpStatus(Run(true).outcome), 502);
  const std::string failed = fake_.prefill_calls()[0].target.iid;
  const std::string other = failed == "p0" ? "p1" : "p0";

  EngineSnapshot s = Snap(failed);
  EXPECT_EQ(s.state, PlacementState::kQuarantined);
  EXPECT_EQ(s.hold_kind, HoldKind::kTimed);
  ASSERT_TRUE(s.hold_remaining_s.has_value());
  EXPECT_DOUBLE_EQ(*s.hold_remaining_s, 5.0);
  EXPECT_THAT(s.hold_cause, HasSubstr("engine_connection"));
  EXPECT_EQ(Metric("narwhal_engine_held", {{"iid", failed}, {"kind", "timed"}}), 1);
  EXPECT_EQ(Metric("narwhal_engine_quarantined", {{"iid", failed}}), 1);
  EXPECT_EQ(Metric("narwhal_engine_quarantined", {{"iid", other}}), 0);

  for (int i = 0; i < 3; ++i) {
    clock_.Advance(1s);
    ASSERT_EQ(nt::HttpStatus(Run(true).outcome), 200);
    EXPECT_EQ(fake_.prefill_calls().back().target.iid, other);
  }

  clock_.Advance(2s);  // 5 s after the failure
  fleet_->admin().PublishAll();
  EXPECT_EQ(Snap(failed).state, PlacementState::kServing);
  EXPECT_EQ(Metric("narwhal_engine_quarantined", {{"iid", failed}}), 0);
  // Back in placement: it takes the next request, or — if that lands on the
  // other producer, which fails and is quarantined now that it is no longer
  // the last one — the one after.
  fake_.QueuePrefill(nt::PrefillStep::Fail(nt::ConnectionLost()), other);
  Result next = Run(true);
  if (fake_.prefill_calls().back().target.iid == other) {
    EXPECT_EQ(nt::HttpStatus(next.outcome), 502);
    ASSERT_EQ(Snap(other).state, PlacementState::kQuarantined);
    next = Run(true);
  }
  EXPECT_EQ(nt::HttpStatus(next.outcome), 200);
  EXPECT_EQ(fake_.prefill_calls().back().target.iid, failed);
}

TEST_F(RouterTest, B15_TheLastEngineOfARoleIsNeverQuarantined) {
  settings_.recovery.failure_quarantine_s = 5;  // p0 + d0
  Start();
  fake_.QueueDecode(nt::DecodeStep::Fail(nt::EngineStatusFailure(500)));
  EXPECT_EQ(nt::HttpStatus(Run(true).outcome), 502);
  fake_.QueuePrefill(nt::PrefillStep::Fail(nt::ConnectRefused()));
  EXPECT_EQ(nt::HttpStatus(Run(true).outcome), 502);
  EXPECT_EQ(Snap("d0").state, PlacementState::kServing);
  EXPECT_EQ(Snap("p0").state, PlacementState::kServing);
  EXPECT_EQ(Metric("narwhal_engine_quarantined", {{"iid", "d0"}}), 0);
  EXPECT_EQ(Metric("narwhal_engine_quarantined", {{"iid", "p0"}}), 0);
  EXPECT_EQ(nt::HttpStatus(Run(true).outcome), 200);
}

TEST_F(RouterTest, B15_QuarantineOffByDefault) {
  settings_.engines = {Engine("p0", Role::kPrefill), Engine("p1", Role::kPrefill),
                       Engine("d0", Role::kDecode)};
  Start();
  fake_.QueuePrefill(nt::PrefillStep::Fail(nt::ConnectionLost()));
  EXPECT_EQ(nt::HttpStatus(Run(true).outcome), 502);
  for (const EngineSnapshot& s : fleet_->admin().Snapshot()) {
    EXPECT_EQ(s.state, PlacementState::kServing) << s.settings.iid;
  }
}

// ---------------------------------------------------------------------------
// B17 breaker bookkeeping.

TEST_F(RouterTest, B17_StreaksCountPerClassAndClearOnMatchingSuccesses) {
  Start();  // p0 + d0, one attempt
  // Prefill transport loss (timeout) and 503 (inference_status) on p0.
  fake_.QueuePrefill(nt::PrefillStep::Fail(nt::ConnectionLost()));
  Run(true);
  fake_.QueuePrefill(nt::PrefillStep::Fail(nt::EngineStatusFailure(503)));
  Run(true);
  EXPECT_EQ(Streak("p0", "timeout"), 1);
  EXPECT_EQ(Streak("p0", "inference_status"), 1);

  // A prefill with a handoff clears every class its legs feed (connection,
  // timeout, overload, inference_status, kv_handoff). Its decode goes
  // silent mid-stream: d0 stream 1.
  fake_.QueueDecode(nt::DecodeStep::FailAfter({nt::CompletionChunk("a")}, nt::ReadTimeout()));
  Run(true);
  EXPECT_EQ(Streak("p0", "inference_status"), 0);
  EXPECT_EQ(Streak("p0", "timeout"), 0);
  EXPECT_EQ(Streak("d0", "stream"), 1);

  // 429 in decode: overload. Then [DONE] clears stream and overload.
  fake_.QueueDecode(nt::DecodeStep::Fail(nt::EngineStatusFailure(429)));
  Run(true);
  fake_.QueueDecode(nt::DecodeStep::Fail(nt::FirstTokenTimeout()));
  Run(true);
  EXPECT_EQ(Streak("d0", "overload"), 1);
  EXPECT_EQ(Streak("d0", "stream"), 2);
  EXPECT_EQ(Snap("d0").streak[static_cast<int>(engines::BreakerClass::kStream)], 2);
  ASSERT_EQ(nt::HttpStatus(Run(true).outcome), 200);
  EXPECT_EQ(Streak("d0", "stream"), 0);
  EXPECT_EQ(Streak("d0", "overload"), 0);

  // 500 (inference_status), then an engine 4xx: alive, clears it (but not
  // the 429 before it).
  fake_.QueueDecode(nt::DecodeStep::Fail(nt::EngineStatusFailure(429)));
  Run(true);
  fake_.QueueDecode(nt::DecodeStep::Fail(nt::EngineStatusFailure(500)));
  Run(true);
  EXPECT_EQ(Streak("d0", "inference_status"), 1);
  fake_.QueueDecode(nt::DecodeStep::Fail(nt::EngineStatusFailure(400)));
  Run(true);
  EXPECT_EQ(Streak("d0", "inference_status"), 0);
  EXPECT_EQ(Streak("d0", "overload"), 1);

  // Connection failures are cleared by a successful leg.
  fake_.QueuePrefill(nt::PrefillStep::Fail(nt::ConnectRefused()));
  Run(true);
  EXPECT_EQ(Streak("p0", "connection"), 1);
  ASSERT_EQ(nt::HttpStatus(Run(true).outcome), 200);
  EXPECT_EQ(Streak("p0", "connection"), 0);
}

TEST_F(RouterTest, B17_StreamStreakHoldsTheDecodeEngineOutOfPlacement) {
  settings_.engines = {Engine("p0", Role::kPrefill), Engine("d0", Role::kDecode),
                       Engine("d1", Role::kDecode)};
  Start();  // eject_after 3, one attempt
  for (const char* iid : {"d0", "d1"}) {
    for (int i = 0; i < 3; ++i)
      fake_.QueueDecode(nt::DecodeStep::Fail(nt::FirstTokenTimeout()), iid);
  }
  std::string held;
  for (int i = 0; i < 10 && held.empty(); ++i) {
    EXPECT_EQ(nt::HttpStatus(Run(true).outcome), 504);
    for (const char* iid : {"d0", "d1"}) {
      if (Snap(iid).state == PlacementState::kHeld) held = iid;
    }
  }
  ASSERT_FALSE(held.empty());
  const std::string other = held == "d0" ? "d1" : "d0";
  EXPECT_EQ(Snap(held).hold_kind, HoldKind::kInference);
  EXPECT_EQ(Metric("narwhal_engine_held", {{"iid", held}, {"kind", "inference"}}), 1);
  EXPECT_EQ(Metric("narwhal_engine_in_placement", {{"iid", held}}), 0);
  fake_.ClearQueues();
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(nt::HttpStatus(Run(true).outcome), 200);
    EXPECT_EQ(fake_.decode_calls().back().target.iid, other);
  }
  bool journaled = false;
  journal_->Flush();
  for (const json& row : nt::ReadJournal(journal_path_)) {
    journaled =
        journaled || (row.value("event", "") == "engine_hold_started" &&
                      row.value("iid", "") == held && row.value("hold_kind", "") == "inference");
  }
  EXPECT_TRUE(journaled);
}

TEST_F(RouterTest, B17_InvalidContinuationCountsAgainstTheProducer) {
  Start();
  fake_.QueueDecode(nt::DecodeStep::InvalidContinuation());
  std::string rid;
  Result r = Run(true, Api::kCompletions, &rid);
  EXPECT_EQ(nt::HttpStatus(r.outcome), 502);
  EXPECT_EQ(nt::ErrorTypeOf(r.outcome), ErrorType::kDecode);
  EXPECT_THAT(r.outcome.message, StartsWith("invalid continuation:"));
  EXPECT_EQ(Streak("p0", "kv_handoff"), 1);
  EXPECT_EQ(Streak("d0", "kv_handoff"), 0);
  EXPECT_EQ(Metric("narwhal_handoff_rejected_total", {{"reason", "missing_engine_id"}}), 1);
  EXPECT_EQ(Row(rid)["attempt_failures"][0]["class"], "kv_handoff");
  EXPECT_EQ(Row(rid)["attempt_failures"][0]["handoff_rejection"], "missing_engine_id");
}

TEST_F(RouterTest, B17_ClientFaultsAreNoEvidence) {
  Start();
  fake_.QueueDecode(nt::DecodeStep::Fail(nt::EngineStatusFailure(400)));
  Run(true);
  fake_.QueueDecode(nt::DecodeStep::Fail(nt::RequestDeadline()));
  Run(true);
  for (const EngineSnapshot& s : fleet_->admin().Snapshot()) {
    for (int c = 0; c < engines::kBreakerClassCount; ++c) {
      EXPECT_EQ(s.streak[c], 0) << s.settings.iid << " class " << c;
    }
  }
}

// ---------------------------------------------------------------------------
// B19 disconnect cancellation.

TEST_F(RouterTest, B19_CancelAbortsTheDecodeLegAndIsNeverRetried) {
  settings_.engines = {Engine("p0", Role::kPrefill), Engine("p1", Role::kPrefill),
                       Engine("d0", Role::kDecode), Engine("d1", Role::kDecode)};
  settings_.serving.max_attempts = 3;
  Start();
  fake_.QueueDecode(nt::DecodeStep::BlockAfter({}));
  Request req = MakeRequest(true);
  const std::string rid = req.rid;
  std::shared_ptr<nt::TestSink> channel = Submit(std::move(req));
  ASSERT_TRUE(fake_.WaitForBlocked(1));
  channel->Cancel();
  Result r = Collect(*channel);
  EXPECT_EQ(r.outcome.terminal, Terminal::kCancelled);
  EXPECT_FALSE(r.outcome.output_started);
  const auto decodes = fake_.decode_calls();
  ASSERT_EQ(decodes.size(), 1u);
  EXPECT_TRUE(decodes[0].saw_cancel);
  EXPECT_EQ(fake_.prefill_calls().size(), 1u);  // never retried
  ExpectNoReservations();
  const json row = Row(rid);
  EXPECT_EQ(row["terminal"], "cancelled");
  EXPECT_TRUE(row["status"].is_null());
  EXPECT_EQ(row["attempt_failures"][0]["retry_reason"], "cancelled");
  EXPECT_EQ(Metric("narwhal_requests_total",
                   {{"api", "completions"}, {"door", "http"}, {"terminal", "cancelled"}}),
            1);
  for (const EngineSnapshot& s : fleet_->admin().Snapshot()) {
    for (int c = 0; c < engines::kBreakerClassCount; ++c) EXPECT_EQ(s.streak[c], 0);
  }
}

TEST_F(RouterTest, B19_CancelDuringPrefill) {
  Start();
  fake_.QueuePrefill(nt::PrefillStep::Block());
  std::shared_ptr<nt::TestSink> channel = Submit(MakeRequest(false));
  ASSERT_TRUE(fake_.WaitForBlocked(1));
  EXPECT_EQ(Snap("p0").inflight_prefill, 1);
  channel->Cancel();
  Result r = Collect(*channel);
  EXPECT_EQ(r.outcome.terminal, Terminal::kCancelled);
  EXPECT_TRUE(fake_.prefill_calls()[0].saw_cancel);
  EXPECT_TRUE(fake_.decode_calls().empty());
  ExpectNoReservations();
}

TEST_F(RouterTest, B19_CancelAfterOutputStarted) {
  Start();
  fake_.QueueDecode(nt::DecodeStep::BlockAfter({nt::CompletionChunk("a")}));
  Request req = MakeRequest(true);
  const std::string rid = req.rid;
  std::shared_ptr<nt::TestSink> channel = Submit(std::move(req));
  Chunk c;
  ASSERT_EQ(channel->Next(&c, 10s), nt::TestSink::Pop::kChunk);
  EXPECT_EQ(c.text, "a");
  ASSERT_TRUE(fake_.WaitForBlocked(1));
  channel->Cancel();
  Result r = Collect(*channel);
  EXPECT_EQ(r.outcome.terminal, Terminal::kCancelled);
  EXPECT_TRUE(r.outcome.output_started);
  EXPECT_EQ(Row(rid)["terminal"], "cancelled");
  ExpectNoReservations();
}

// ---------------------------------------------------------------------------
// Admission and drain.

TEST_F(RouterTest, Admission_InflightLimitRejectsAtOnceWith429) {
  settings_.serving.max_inflight = 1;
  Start();
  fake_.QueueDecode(nt::DecodeStep::BlockAfter({}));
  std::shared_ptr<nt::TestSink> first = Submit(MakeRequest(true));
  ASSERT_TRUE(fake_.WaitForBlocked(1));

  Request req = MakeRequest(true);
  const std::string rid = req.rid;
  std::shared_ptr<nt::TestSink> second = Submit(std::move(req));
  Chunk c;
  ASSERT_EQ(second->Next(&c, 10s), nt::TestSink::Pop::kEnd);  // refused at once
  const Outcome& o = second->outcome();
  EXPECT_EQ(nt::HttpStatus(o), 429);
  EXPECT_EQ(nt::ErrorTypeOf(o), ErrorType::kRateLimit);
  EXPECT_EQ(o.terminal, Terminal::kRejected);
  EXPECT_EQ(nt::ReasonOf(o), "inflight_limit");
  const json row = Row(rid);
  EXPECT_EQ(row["terminal"], "rejected");
  EXPECT_EQ(row["reason"], "inflight_limit");
  EXPECT_EQ(row["status"], 429);
  EXPECT_EQ(row["error_type"], "rate_limit_error");
  EXPECT_EQ(Metric("narwhal_requests_total",
                   {{"api", "completions"}, {"door", "http"}, {"terminal", "rejected"}}),
            1);
  EXPECT_EQ(fake_.prefill_calls().size(), 1u);

  first->Cancel();
  EXPECT_EQ(Collect(*first).outcome.terminal, Terminal::kCancelled);
}

TEST_F(RouterTest, Admission_SlotIsFreeOnceTheOutcomeIsVisible) {
  // A client that receives its response and at once sends the next request
  // must not be refused by its own finished request.
  settings_.serving.max_inflight = 1;
  Start();
  std::promise<void> polled;
  std::shared_future<void> polled_future = polled.get_future().share();
  nt::PrefillStep step = nt::PrefillStep::Ok();
  step.on_start = [polled_future] { polled_future.wait_for(10s); };
  fake_.QueuePrefill(step);
  std::shared_ptr<nt::TestSink> first = Submit(MakeRequest(false));

  std::promise<std::shared_ptr<nt::TestSink>> next_promise;
  std::atomic<bool> submitted{false};
  first->SetReadyCallback([&] {
    // Runs the moment the first request's end becomes visible.
    Chunk c;
    if (first->TryNext(&c) == nt::TestSink::Pop::kEnd && !submitted.exchange(true)) {
      next_promise.set_value(Submit(MakeRequest(false)));
    }
  });
  Chunk c;
  ASSERT_EQ(first->TryNext(&c), nt::TestSink::Pop::kEmpty);
  polled.set_value();
  auto next_future = next_promise.get_future();
  ASSERT_EQ(next_future.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(nt::HttpStatus(first->outcome()), 200);
  Result r = Collect(*next_future.get());
  EXPECT_EQ(nt::HttpStatus(r.outcome), 200) << r.outcome.message;
  WaitIdle();
}

TEST_F(RouterTest, B23_EngineThatLeavesMidLegIsHeldUntilTheLegEnds) {
  // p0 leaves the fleet while its prefill runs; the leg ends, the sweep
  // finds p0 idle and drops it, and the attempt goes on to its decode and
  // completes: an engine that left mid-leg costs its request nothing. (The
  // leg's cancellation hook on p0's token lives to the end of the attempt,
  // so the leg holds p0's record; the chaos soak's membership churn is what
  // exposed a freed one.)
  settings_.engines = {Engine("p0", Role::kPrefill), Engine("p1", Role::kPrefill),
                       Engine("d0", Role::kDecode)};
  Start();
  std::promise<void> removed;
  std::shared_future<void> removed_future = removed.get_future().share();
  nt::PrefillStep prefill = nt::PrefillStep::Ok();
  prefill.on_start = [removed_future] { removed_future.wait_for(10s); };
  fake_.QueuePrefill(prefill);
  nt::DecodeStep decode = nt::DecodeStep::Stream({nt::CompletionChunk("a", "length")});
  std::promise<void> swept;
  std::shared_future<void> swept_future = swept.get_future().share();
  decode.on_start = [swept_future] { swept_future.wait_for(10s); };
  fake_.QueueDecode(decode);
  std::shared_ptr<nt::TestSink> sink = Submit(MakeRequest(false));
  while (fake_.prefill_calls().empty()) std::this_thread::sleep_for(1ms);
  const std::string producer = fake_.prefill_calls()[0].target.iid;
  const MemberSource file{SourceKind::kFile, ""};
  ASSERT_TRUE(fleet_->admin().RemoveEngine(producer, file).ok());
  removed.set_value();
  // The prefill ended and released p0: it is gone from the fleet for good.
  const auto until = std::chrono::steady_clock::now() + 10s;
  bool gone = false;
  while (!gone && std::chrono::steady_clock::now() < until) {
    fleet_->control().SweepLeaving();
    gone = true;
    for (const EngineSnapshot& s : fleet_->admin().Snapshot())
      gone = gone && s.settings.iid != producer;
    if (!gone) std::this_thread::sleep_for(1ms);
  }
  ASSERT_TRUE(gone);
  swept.set_value();
  Result r = Collect(*sink);
  EXPECT_EQ(r.outcome.terminal, Terminal::kCompleted) << r.outcome.message;
  WaitIdle();
}

TEST_F(RouterTest, Admission_SubmitAfterDrainIs503) {
  Start();
  router_->Drain(0s, loops_.executor(0));
  Request req = MakeRequest(true);
  const std::string rid = req.rid;
  Result r = Run(std::move(req));
  EXPECT_EQ(nt::HttpStatus(r.outcome), 503);
  EXPECT_EQ(nt::ErrorTypeOf(r.outcome), ErrorType::kBackendUnavailable);
  EXPECT_EQ(r.outcome.terminal, Terminal::kRejected);
  EXPECT_EQ(Row(rid)["status"], 503);
  EXPECT_TRUE(fake_.prefill_calls().empty());
}

TEST_F(RouterTest, DrainCutsRequestsThatOutliveTheGraceAsFailedByShutdown) {
  Start();
  fake_.QueueDecode(nt::DecodeStep::BlockAfter({nt::CompletionChunk("a")}));
  Request req = MakeRequest(true);
  const std::string rid = req.rid;
  std::shared_ptr<nt::TestSink> channel = Submit(std::move(req));
  ASSERT_TRUE(fake_.WaitForBlocked(1));
  EXPECT_EQ(router_->Drain(0s, loops_.executor(0)), 1u);
  EXPECT_EQ(router_->inflight(), 0);
  Result r = Collect(*channel);
  // Not the client's cancellation: a failure of the router's own, after output.
  EXPECT_EQ(r.outcome.terminal, Terminal::kFailed);
  EXPECT_EQ(r.outcome.reason, Reason::kShuttingDown);
  EXPECT_TRUE(r.outcome.output_started);
  EXPECT_EQ(nt::HttpStatus(r.outcome), 503);
  EXPECT_EQ(r.outcome.message.rfind("router shut down before the request finished", 0), 0u);
  EXPECT_TRUE(fake_.decode_calls()[0].saw_cancel);
  ExpectNoReservations();
  const json row = Row(rid);
  EXPECT_EQ(row["terminal"], "failed");
  EXPECT_EQ(row["reason"], "shutting_down");
}

TEST_F(RouterTest, DrainWithNothingLeftCutsNothing) {
  Start();
  EXPECT_EQ(router_->Drain(0s, loops_.executor(0)), 0u);
}

// Whether `clock` has a timer waiting for exactly `deadline`.
bool HasTimerAt(const nt::FakeClock& clock, engines::MonoTime deadline) {
  const std::vector<engines::MonoTime> armed = clock.pending_deadlines();
  return std::find(armed.begin(), armed.end(), deadline) != armed.end();
}

// Waits (real time, bounded) until it has.
bool WaitTimerAt(const nt::FakeClock& clock, engines::MonoTime deadline) {
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (!HasTimerAt(clock, deadline)) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

// The grace period is measured on the injected clock: Drain arms its grace
// timer for exactly 30 s on the clock; 29 fake seconds in, once the loop ran
// whatever came due, that timer still waits and the stalled request still
// runs; at 30 s it is cancelled and Drain returns, with the clock at 30 s.
// No real time passes in between beyond loop turns.
TEST_F(RouterTest, DrainGraceRunsOnTheInjectedClock) {
  Start();
  fake_.QueueDecode(nt::DecodeStep::BlockAfter({}));
  std::shared_ptr<nt::TestSink> channel = Submit(MakeRequest(true));
  ASSERT_TRUE(fake_.WaitForBlocked(1));
  const engines::MonoTime grace_end = clock_.Now() + 30s;
  std::atomic<bool> drained{false};
  engines::MonoTime drained_at{};
  std::thread drainer([&] {
    router_->Drain(30s, loops_.executor(0));
    drained_at = clock_.Now();
    drained = true;
  });
  ASSERT_TRUE(WaitTimerAt(clock_, grace_end)) << "the grace timer was never armed at 30 s";
  clock_.Advance(29s);
  // The loop runs the timers that came due (none may be the grace's).
  engines::RunBlocking(loops_.executor(0), []() -> engines::Awaitable<bool> { co_return true; }());
  // Drain releases its timer only once its wait ended: still armed, the
  // grace has not ended, and the request was not cut.
  EXPECT_TRUE(HasTimerAt(clock_, grace_end)) << "the grace ended before 30 s on the clock";
  EXPECT_FALSE(drained.load()) << "Drain ended before its grace on the injected clock";
  EXPECT_FALSE(fake_.decode_calls()[0].saw_cancel);
  clock_.Advance(1s);
  const auto advanced = std::chrono::steady_clock::now();
  while (!drained.load() && std::chrono::steady_clock::now() - advanced < 5s) {
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_TRUE(drained.load()) << "the grace ended on the clock but Drain did not return";
  drainer.join();
  EXPECT_EQ(drained_at, grace_end);
  EXPECT_FALSE(HasTimerAt(clock_, grace_end));
  Result r = Collect(*channel);
  EXPECT_EQ(r.outcome.terminal, Terminal::kFailed);
  EXPECT_EQ(r.outcome.reason, Reason::kShuttingDown);
  EXPECT_TRUE(fake_.decode_calls()[0].saw_cancel);
  ExpectNoReservations();
}

// A request that ends within the grace lets Drain return without any time
// passing on the clock: Drain waits on its grace timer (armed for 30 s on
// the clock, which never moves), the request ends as the client's
// cancellation, and Drain returns having cut nothing.
TEST_F(RouterTest, DrainReturnsWhenTheLastRequestEnds) {
  Start();
  fake_.QueueDecode(nt::DecodeStep::BlockAfter({}));
  std::shared_ptr<nt::TestSink> channel = Submit(MakeRequest(true));
  ASSERT_TRUE(fake_.WaitForBlocked(1));
  const engines::MonoTime t0 = clock_.Now();
  std::atomic<bool> drained{false};
  size_t cut = 0;
  std::thread drainer([&] {
    cut = router_->Drain(30s, loops_.executor(0));
    drained = true;
  });
  // Drain waits for its grace on the clock; the request still runs.
  ASSERT_TRUE(WaitTimerAt(clock_, t0 + 30s)) << "the grace timer was never armed at 30 s";
  EXPECT_FALSE(drained.load());
  EXPECT_FALSE(fake_.decode_calls()[0].saw_cancel);
  channel->cancel_token().Cancel();  // the client goes away: the request ends
  drainer.join();
  EXPECT_TRUE(drained.load());
  // The request ended before any cut: the client's cancellation, not a
  // shutdown failure; the grace timer released; the clock never moved.
  EXPECT_EQ(cut, 0u);
  EXPECT_EQ(Collect(*channel).outcome.terminal, Terminal::kCancelled);
  EXPECT_FALSE(HasTimerAt(clock_, t0 + 30s));
  EXPECT_EQ(clock_.Now(), t0);
}

TEST_F(RouterTest, RecordRefusedJournalsAndCounts) {
  Start();
  Request req = MakeRequest(false);
  const Outcome o = RefusalOutcome(Terminal::kInvalid, Reason::kInvalidRequest, "malformed JSON");
  router_->RecordRefused(req, o);
  const json row = Row(req.rid);
  EXPECT_EQ(row["terminal"], "invalid");
  EXPECT_EQ(row["status"], 400);
  EXPECT_EQ(row["attempts"], 0);
  EXPECT_EQ(Metric("narwhal_requests_total", {{"terminal", "invalid"}}), 1);
}

TEST_F(RouterTest, EveryRequestWritesExactlyOneJournalRow) {
  settings_.engines = {Engine("p0", Role::kPrefill), Engine("p1", Role::kPrefill),
                       Engine("d0", Role::kDecode), Engine("d1", Role::kDecode)};
  settings_.serving.max_attempts = 2;
  Start();
  fake_.QueuePrefill(nt::PrefillStep::Fail(nt::ConnectionLost()));
  fake_.QueueDecode(nt::DecodeStep::Fail(nt::EngineStatusFailure(400)));
  std::vector<std::string> rids(3);
  for (std::string& rid : rids) Run(true, Api::kCompletions, &rid);
  std::vector<json> rows;
  journal_->Flush();
  for (json& row : nt::ReadJournal(journal_path_)) {
    if (row.contains("rid")) rows.push_back(std::move(row));  // not event rows
  }
  ASSERT_EQ(rows.size(), 3u);
  for (size_t i = 0; i < rids.size(); ++i) EXPECT_EQ(rows[i]["rid"], rids[i]);
}

}  // namespace
}  // namespace narwhal::router

namespace narwhal::router {
namespace {

// W3C trace context: every engine leg carries a child of the request's
// trace with a span of its own; the journal names the trace.
TEST_F(RouterTest, EveryLegCarriesAChildOfTheRequestsTraceAndTheJournalNamesIt) {
  settings_.engines = {Engine("p0", Role::kPrefill), Engine("p1", Role::kPrefill),
                       Engine("d0", Role::kDecode), Engine("d1", Role::kDecode)};
  settings_.serving.max_attempts = 2;
  Start();
  fake_.QueueDecode(nt::DecodeStep::Fail(nt::FirstTokenTimeout()));
  Request req = MakeRequest(true);
  const std::string rid = req.rid;
  req.trace = *ParseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                                "congo=t61rcWkgMzE");
  ASSERT_EQ(Run(std::move(req)).outcome.terminal, Terminal::kCompleted);
  std::set<std::string> spans;
  std::vector<std::string> headers;
  for (const auto& p : fake_.prefill_calls()) headers.push_back(p.traceparent);
  for (const auto& d : fake_.decode_calls()) headers.push_back(d.traceparent);
  ASSERT_EQ(headers.size(), 4u);  // two attempts, two legs each
  for (const std::string& h : headers) {
    ASSERT_EQ(h.size(), 55u) << h;
    EXPECT_EQ(h.substr(0, 36), "00-4bf92f3577b34da6a3ce929d0e0e4736-") << h;
    EXPECT_EQ(h.substr(52), "-01") << h;
    EXPECT_NE(h.substr(36, 16), "00f067aa0ba902b7");  // not the client's span
    spans.insert(h.substr(36, 16));
  }
  EXPECT_EQ(spans.size(), 4u);  // one span per leg
  for (const auto& d : fake_.decode_calls()) EXPECT_EQ(d.tracestate, "congo=t61rcWkgMzE");
  EXPECT_EQ(Row(rid).value("trace_id", ""), "4bf92f3577b34da6a3ce929d0e0e4736");
}

// Collects what the router exports.
class CollectingSpanSink : public SpanSink {
 public:
  void Export(RequestSpans spans) override {
    std::lock_guard<std::mutex> lock(mu_);
    exported_.push_back(std::move(spans));
  }
  std::vector<RequestSpans> exported() {
    std::lock_guard<std::mutex> lock(mu_);
    return exported_;
  }

 private:
  std::mutex mu_;
  std::vector<RequestSpans> exported_;
};

TEST_F(RouterTest, ASampledRequestExportsItsSpanAndOneSpanPerPhaseWithTheLegsIds) {
  settings_.engines = {Engine("p0", Role::kPrefill), Engine("p1", Role::kPrefill),
                       Engine("d0", Role::kDecode), Engine("d1", Role::kDecode)};
  settings_.serving.max_attempts = 2;
  Start();
  CollectingSpanSink sink;
  router_->SetSpanSink(&sink);
  fake_.QueueDecode(nt::DecodeStep::Fail(nt::FirstTokenTimeout()));
  Request req = MakeRequest(true, Api::kChatCompletions);
  req.arrived_wall = 1700000000;
  req.trace = *ParseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "");
  ASSERT_EQ(Run(std::move(req)).outcome.terminal, Terminal::kCompleted);
  const std::vector<RequestSpans> exported = sink.exported();
  ASSERT_EQ(exported.size(), 1u);
  const RequestSpans& r = exported[0];
  EXPECT_EQ(r.trace.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(r.trace.parent_id, "00f067aa0ba902b7");
  EXPECT_EQ(r.request.name, "chat m");
  EXPECT_EQ(r.request.kind, SpanKind::kServer);
  EXPECT_EQ(r.request.attributes["gen_ai.operation.name"], "chat");
  EXPECT_EQ(r.request.attributes["gen_ai.request.model"], "m");
  EXPECT_EQ(r.request.attributes["narwhal.attempts"], 2);
  EXPECT_EQ(r.request.attributes["narwhal.terminal"], "completed");
  EXPECT_TRUE(r.request.error.empty());
  EXPECT_EQ(r.request.start_unix_s, 1700000000);

  std::vector<std::string> names;
  std::map<std::string, const PhaseSpan*> by_id;
  for (const PhaseSpan& p : r.phases) {
    names.push_back(p.name);
    by_id[p.span_id] = &p;
  }
  // The first attempt's legs under the request; the second under its retry.
  EXPECT_EQ(names, (std::vector<std::string>{"admission", "prefill", "handoff_check", "decode",
                                             "retry", "prefill", "handoff_check", "decode"}));
  EXPECT_EQ(by_id.size(), r.phases.size());  // distinct ids
  const std::string retry = r.phases[4].span_id;
  for (size_t i = 0; i < r.phases.size(); ++i) {
    EXPECT_EQ(r.phases[i].parent_id, i <= 4 ? r.request.span_id : retry) << i;
  }
  EXPECT_EQ(r.phases[4].attributes["narwhal.attempt"], 2);
  // The failed decode carries its failure; the legs are client spans whose
  // ids are the ones their engines received.
  EXPECT_NE(r.phases[3].error.find("no first token within"), std::string::npos)
      << r.phases[3].error;
  EXPECT_TRUE(r.phases[7].error.empty());
  const auto& prefills = fake_.prefill_calls();
  const auto& decodes = fake_.decode_calls();
  ASSERT_EQ(prefills.size(), 2u);
  ASSERT_EQ(decodes.size(), 2u);
  EXPECT_EQ(prefills[0].traceparent.substr(36, 16), r.phases[1].span_id);
  EXPECT_EQ(decodes[0].traceparent.substr(36, 16), r.phases[3].span_id);
  EXPECT_EQ(prefills[1].traceparent.substr(36, 16), r.phases[5].span_id);
  EXPECT_EQ(decodes[1].traceparent.substr(36, 16), r.phases[7].span_id);
  EXPECT_EQ(r.phases[1].kind, SpanKind::kClient);
  EXPECT_EQ(r.phases[3].attributes["narwhal.engine.iid"], decodes[0].target.iid);
  EXPECT_EQ(r.phases[1].attributes["narwhal.engine.iid"], prefills[0].target.iid);
  for (const PhaseSpan& p : r.phases) {
    EXPECT_GE(p.start_unix_s, r.request.start_unix_s) << p.name;
    EXPECT_LE(p.start_unix_s, p.end_unix_s) << p.name;
    EXPECT_LE(p.end_unix_s, r.request.end_unix_s) << p.name;
  }
}

TEST_F(RouterTest, AnUnsampledTraceExportsNothing) {
  Start();
  CollectingSpanSink sink;
  router_->SetSpanSink(&sink);
  Request req = MakeRequest(false);
  req.trace = *ParseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", "");
  ASSERT_EQ(Run(std::move(req)).outcome.terminal, Terminal::kCompleted);
  EXPECT_TRUE(sink.exported().empty());
}

TEST_F(RouterTest, ARequestWithoutATraceSendsNoTraceHeaders) {
  Start();
  Request req = MakeRequest(true);  // no trace (the doors always give one)
  const std::string rid = req.rid;
  ASSERT_EQ(Run(std::move(req)).outcome.terminal, Terminal::kCompleted);
  ASSERT_EQ(fake_.prefill_calls().size(), 1u);
  EXPECT_EQ(fake_.prefill_calls()[0].traceparent, "");
  EXPECT_EQ(fake_.decode_calls()[0].traceparent, "");
  EXPECT_TRUE(Row(rid)["trace_id"].is_null());
}

}  // namespace
}  // namespace narwhal::router
