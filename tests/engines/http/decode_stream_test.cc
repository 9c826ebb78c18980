// The decode leg's rules (engines/http/decode_stream.h) driven with bytes and
// times alone: no socket, no event loop, no clock but the values passed in.
#include "engines/http/decode_stream.h"

#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engines/cancel_token.h"

namespace narwhal::engines {
namespace {

using json = nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;

const MonoTime kT0 = MonoTime{} + seconds(1000);

MonoTime At(double s) { return kT0 + FromSeconds(s); }

json StreamDescriptor() {
  return json{{"do_remote_prefill", true},  {"do_remote_decode", false},
              {"remote_block_ids", {1, 2}}, {"remote_engine_id", "e-1"},
              {"remote_request_id", "r-1"}, {"remote_host", "10.0.0.11"},
              {"remote_port", 5600},        {"tp_size", 1}};
}

PrefillResult StreamHandoff() {
  return PrefillResult("p0", "http://127.0.0.1:9001", Api::kChatCompletions, "rid-1",
                       "NixlConnector", StreamDescriptor());
}

std::string Token(const std::string& text) {
  return "data: " +
         json{{"id", "c"}, {"choices", {{{"index", 0}, {"delta", {{"content", text}}}}}}}.dump() +
         "\n\n";
}
std::string Metadata() {
  return "data: " + json{{"id", "c"}, {"choices", json::array()}}.dump() + "\n\n";
}
const std::string kDone = "data: [DONE]\n\n";

DecodeLegEnd TimedOut(LegBound bound, std::string key = "") {
  DecodeLegEnd end;
  end.timed_out = bound;
  end.connection_key = std::move(key);
  return end;
}

// Records every event the leg hands on; stops the leg after `stop_after`.
class RecordingObserver : public DecodeObserver {
 public:
  bool OnEvent(std::string_view data, const StreamEvent& event) override {
    events.emplace_back(data);
    kinds.push_back(event.kind);
    return static_cast<int>(events.size()) != stop_after;
  }
  std::vector<std::string> events;
  std::vector<EventKind> kinds;
  int stop_after = -1;
};

class DecodeStreamTest : public ::testing::Test {
 protected:
  DecodeStreamTest() {
    opts_.first_token_timeout_s = 2.5;
    opts_.decode_read_timeout_s = 10;
    opts_.connect_timeout_s = 1;
  }

  // A leg that started at kT0 with a request deadline 60 s later, connected
  // and with its request sent, whose engine answered `status`.
  DecodeStream& Streaming(int status = 200) {
    stream_.emplace(opts_, consumer_, kT0, At(60), observer_);
    stream_->Connected();
    stream_->RequestSent();
    stream_->Head(status);
    return *stream_;
  }

  HttpEngineClientOptions opts_;
  EngineTarget consumer_{"d0", "http://127.0.0.1:9002"};
  RecordingObserver observer_;
  std::optional<DecodeStream> stream_;
};

// ---------------------------------------------------------------------------
// Before any I/O

TEST_F(DecodeStreamTest, RefusesAReusedHandoffWithoutEvidence) {
  const PrefillResult handoff = StreamHandoff();
  std::string host;
  int port = 0;
  EXPECT_FALSE(DecodeStream::Refuse(consumer_, handoff, opts_, {}, kT0, &host, &port));
  EXPECT_EQ(host, "127.0.0.1");
  EXPECT_EQ(port, 9002);
  const std::optional<DecodeOutcome> again =
      DecodeStream::Refuse(consumer_, handoff, opts_, {}, kT0, &host, &port);
  ASSERT_TRUE(again && again->failure);
  EXPECT_EQ(again->failure->handoff_rejection, "reused_handoff");
  EXPECT_EQ(again->failure->breaker_class, BreakerClass::kNone);
  EXPECT_FALSE(again->handoff_left_with_producer);
}

TEST_F(DecodeStreamTest, RefusesAnInvalidDescriptorAsEvidenceAgainstItsProducer) {
  json descriptor = StreamDescriptor();
  descriptor.erase("remote_block_ids");
  const PrefillResult handoff("p0", "http://127.0.0.1:9001", Api::kChatCompletions, "rid-1",
                              "NixlConnector", descriptor);
  std::string host;
  int port = 0;
  const std::optional<DecodeOutcome> out =
      DecodeStream::Refuse(consumer_, handoff, opts_, {}, kT0, &host, &port);
  ASSERT_TRUE(out && out->failure);
  EXPECT_EQ(out->failure->breaker_class, BreakerClass::kKvHandoff);
  EXPECT_EQ(out->failure->evidence_iid, "p0");
  EXPECT_EQ(out->failure->cause, FailureCause::kInvalidContinuation);
}

TEST_F(DecodeStreamTest, RefusesACancelledOrLateRequestAndLeavesTheHandoffWithItsProducer) {
  CancelToken cancel;
  cancel.Cancel();
  LegOptions cancelled;
  cancelled.cancel = &cancel;
  std::string host;
  int port = 0;
  std::optional<DecodeOutcome> out =
      DecodeStream::Refuse(consumer_, StreamHandoff(), opts_, cancelled, kT0, &host, &port);
  ASSERT_TRUE(out && out->failure);
  EXPECT_EQ(out->failure->reason, FailureReason::kCancelled);
  EXPECT_TRUE(out->handoff_left_with_producer);

  LegOptions late;
  late.request_deadline = kT0;
  out = DecodeStream::Refuse(consumer_, StreamHandoff(), opts_, late, kT0, &host, &port);
  ASSERT_TRUE(out && out->failure);
  EXPECT_EQ(out->failure->reason, FailureReason::kDeadline);
  EXPECT_TRUE(out->handoff_left_with_producer);
}

TEST_F(DecodeStreamTest, RefusesABadEngineUrl) {
  const EngineTarget bad{"d9", "ftp://nowhere"};
  std::string host;
  int port = 0;
  const std::optional<DecodeOutcome> out =
      DecodeStream::Refuse(bad, StreamHandoff(), opts_, {}, kT0, &host, &port);
  ASSERT_TRUE(out && out->failure);
  EXPECT_EQ(out->failure->cause, FailureCause::kBadUrl);
  EXPECT_EQ(out->failure->reason, FailureReason::kEngineUnreachable);
}

// ---------------------------------------------------------------------------
// Timers

TEST_F(DecodeStreamTest, ConnectIsBoundByTheEarlierOfConnectAndFirstToken) {
  DecodeStream stream(opts_, consumer_, kT0, At(60), observer_);
  EXPECT_EQ(stream.Connecting(kT0), (LegAlarm{At(1), LegBound::kConnect}));
  // Connecting late in the first-token budget: the budget bounds it (B12).
  EXPECT_EQ(stream.Connecting(At(2)), (LegAlarm{At(2.5), LegBound::kFirstToken}));
  EXPECT_EQ(stream.Connected(), (LegAlarm{At(2.5), LegBound::kFirstToken}));
  // A request deadline before the first-token budget bounds both.
  DecodeStream tight(opts_, consumer_, kT0, At(2), observer_);
  EXPECT_EQ(tight.Connected(), (LegAlarm{At(2), LegBound::kRequest}));
}

TEST_F(DecodeStreamTest, ReadTimerRestartsOnEveryCompleteUnitAfterTheFirstToken) {
  DecodeStream& s = Streaming();
  EXPECT_TRUE(s.Body(Metadata(), At(0.5)));
  EXPECT_FALSE(s.TakeAlarm()) << "metadata before the first token leaves B12 armed";
  EXPECT_TRUE(s.Body(Token("a"), At(1)));
  EXPECT_EQ(s.TakeAlarm(), (LegAlarm{At(11), LegBound::kRead}));
  EXPECT_TRUE(s.Body(": keep-alive\n\n", At(3)));
  EXPECT_EQ(s.TakeAlarm(), (LegAlarm{At(13), LegBound::kRead}));
  // Half an event is no unit: the silence goes on.
  const std::string next = Token("b");
  EXPECT_TRUE(s.Body(next.substr(0, 10), At(5)));
  EXPECT_FALSE(s.TakeAlarm());
  EXPECT_TRUE(s.Body(next.substr(10), At(6)));
  EXPECT_EQ(s.TakeAlarm(), (LegAlarm{At(16), LegBound::kRead}));
  EXPECT_EQ(observer_.events.size(), 3u);
}

TEST_F(DecodeStreamTest, ReadTimerNeverOutlivesTheRequestDeadline) {
  DecodeStream& s = Streaming();
  EXPECT_TRUE(s.Body(Token("a"), At(55)));
  EXPECT_EQ(s.TakeAlarm(), (LegAlarm{At(60), LegBound::kRequest}));
}

TEST_F(DecodeStreamTest, AClientFlushPausesTheReadTimerAndShiftsItsSilence) {
  DecodeStream& s = Streaming();
  ASSERT_TRUE(s.Body(Token("a"), At(1)));
  ASSERT_TRUE(s.TakeAlarm());
  EXPECT_TRUE(s.FlushStarted(At(2))) << "after the first token the timer pauses";
  // The client took 7 s: the engine's silence is still 1 s old.
  EXPECT_EQ(s.FlushEnded(At(9), true), (LegAlarm{At(18), LegBound::kRead}));
}

TEST_F(DecodeStreamTest, AFlushBeforeTheFirstTokenKeepsTheFirstTokenBudget) {
  DecodeStream& s = Streaming();
  ASSERT_TRUE(s.Body(Metadata(), At(0.5)));
  EXPECT_FALSE(s.FlushStarted(At(0.5)));
  EXPECT_EQ(s.FlushEnded(At(2), true), (LegAlarm{At(2.5), LegBound::kFirstToken}));
}

TEST_F(DecodeStreamTest, AClientThatStopsInAFlushCancelsTheLeg) {
  DecodeStream& s = Streaming();
  ASSERT_TRUE(s.Body(Token("a"), At(1)));
  s.FlushStarted(At(1));
  EXPECT_FALSE(s.FlushEnded(At(1), false));
  const DecodeOutcome out = s.Finish({});
  ASSERT_TRUE(out.failure);
  EXPECT_EQ(out.failure->reason, FailureReason::kCancelled);
  EXPECT_FALSE(out.handoff_left_with_producer);
}

// ---------------------------------------------------------------------------
// Ends

TEST_F(DecodeStreamTest, TokensThenDoneSucceed) {
  DecodeStream& s = Streaming();
  EXPECT_TRUE(s.Body(Token("Hel") + Token("lo"), At(1)));
  EXPECT_FALSE(s.Body(kDone, At(2))) << "[DONE] ends the reading";
  EXPECT_TRUE(s.Succeeded());
  EXPECT_TRUE(s.Finish({}).ok());
  ASSERT_EQ(observer_.kinds.size(), 2u);
  EXPECT_EQ(observer_.kinds[0], EventKind::kToken);
}

TEST_F(DecodeStreamTest, DoneBeforeAnyTokenIsAStreamFailure) {
  DecodeStream& s = Streaming();
  EXPECT_FALSE(s.Body(Metadata() + kDone, At(1)));
  EXPECT_FALSE(s.Succeeded());
  const DecodeOutcome out = s.Finish({});
  ASSERT_TRUE(out.failure);
  EXPECT_EQ(out.failure->cause, FailureCause::kEarlyDone);
  EXPECT_EQ(out.failure->breaker_class, BreakerClass::kStream);
}

TEST_F(DecodeStreamTest, AnEndWithoutDoneIsUnterminated) {
  DecodeStream& s = Streaming();
  EXPECT_TRUE(s.Body(Token("a"), At(1)));
  const DecodeOutcome out = s.Finish({});
  ASSERT_TRUE(out.failure);
  EXPECT_EQ(out.failure->cause, FailureCause::kUnterminated);
  EXPECT_FALSE(out.handoff_left_with_producer) << "the consumer had the request";
}

TEST_F(DecodeStreamTest, FirstTokenTimeoutTellsSilenceFromBusyMetadata) {
  DecodeStream& silent = Streaming();
  DecodeOutcome out = silent.Finish(TimedOut(LegBound::kFirstToken));
  ASSERT_TRUE(out.failure);
  EXPECT_EQ(out.failure->cause, FailureCause::kFirstTokenTimeout);
  EXPECT_EQ(out.failure->breaker_class, BreakerClass::kStream);
  EXPECT_NE(out.failure->detail.find("no frames at all"), std::string::npos);

  RecordingObserver observer;
  DecodeStream busy(opts_, consumer_, kT0, At(60), observer);
  busy.RequestSent();
  busy.Head(200);
  ASSERT_TRUE(busy.Body(Metadata() + Metadata(), At(1)));
  out = busy.Finish(TimedOut(LegBound::kFirstToken));
  ASSERT_TRUE(out.failure);
  EXPECT_EQ(out.failure->breaker_class, BreakerClass::kOverload);
  EXPECT_NE(out.failure->detail.find("2 metadata frame(s)"), std::string::npos);
}

TEST_F(DecodeStreamTest, ReadTimeoutAndDeadlineAndConnectTimeoutAreTold) {
  DecodeOutcome out = Streaming().Finish(TimedOut(LegBound::kRead));
  EXPECT_EQ(out.failure->cause, FailureCause::kReadTimeout);
  out = Streaming().Finish(TimedOut(LegBound::kRequest));
  EXPECT_EQ(out.failure->reason, FailureReason::kDeadline);

  DecodeStream connecting(opts_, consumer_, kT0, At(60), observer_);
  out = connecting.Finish(TimedOut(LegBound::kConnect, "h:1"));
  EXPECT_EQ(out.failure->cause, FailureCause::kConnectTimeout);
  EXPECT_NE(out.failure->detail.find("connect to h:1 timed out after 1s"), std::string::npos);
  EXPECT_TRUE(out.handoff_left_with_producer) << "the request never left";
}

TEST_F(DecodeStreamTest, AnInStreamErrorIsClassifiedAsOne) {
  DecodeStream& s = Streaming();
  ASSERT_TRUE(s.Body(Token("a"), At(1)));
  EXPECT_FALSE(s.Body(
      "data: " + json{{"error", {{"code", 503}, {"message", "engine overloaded"}}}}.dump() + "\n\n",
      At(2)));
  const DecodeOutcome out = s.Finish({});
  ASSERT_TRUE(out.failure);
  EXPECT_EQ(out.failure->engine_status, 503);
  EXPECT_NE(out.failure->detail.find("engine overloaded"), std::string::npos);
}

TEST_F(DecodeStreamTest, AMalformedEventFailsTheLeg) {
  DecodeStream& s = Streaming();
  EXPECT_FALSE(s.Body("data: {not json\n\n", At(1)));
  const DecodeOutcome out = s.Finish({});
  ASSERT_TRUE(out.failure);
  EXPECT_EQ(out.failure->cause, FailureCause::kMalformedStream);
  EXPECT_TRUE(observer_.events.empty()) << "nothing of it reaches the client";
}

TEST_F(DecodeStreamTest, TheObserverStoppingIsACancellation) {
  observer_.stop_after = 1;
  DecodeStream& s = Streaming();
  EXPECT_FALSE(s.Body(Token("a") + Token("b"), At(1)));
  EXPECT_EQ(observer_.events.size(), 1u);
  EXPECT_EQ(s.Finish({}).failure->reason, FailureReason::kCancelled);
}

TEST_F(DecodeStreamTest, AnErrorStatusIsClassifiedFromItsBoundedBody) {
  DecodeStream& s = Streaming(429);
  EXPECT_TRUE(s.Body(R"({"error":{"message":"too many requests","code":429}})", At(1)));
  const DecodeOutcome out = s.Finish({});
  ASSERT_TRUE(out.failure);
  EXPECT_EQ(out.failure->engine_status, 429);
  EXPECT_NE(out.failure->detail.find("too many requests"), std::string::npos);
  EXPECT_TRUE(out.handoff_left_with_producer) << "refused before streaming";
  EXPECT_TRUE(observer_.events.empty());

  DecodeStream& big = Streaming(500);
  const std::string kib(1024, 'x');
  int taken = 0;
  while (big.Body(kib, At(1))) ++taken;
  EXPECT_EQ(taken, 63) << "the 64th KiB fills the error body and reading stops";
}

TEST_F(DecodeStreamTest, NoStatusReportsTheLoopsTransportFailure) {
  DecodeStream s(opts_, consumer_, kT0, At(60), observer_);
  DecodeLegEnd end;
  end.transport = MakeFailure(Phase::kDecode, "d0", FailureReason::kEngineUnreachable,
                              BreakerClass::kConnection, FailureCause::kConnectFailed,
                              "connection refused", true);
  const DecodeOutcome out = s.Finish(std::move(end));
  ASSERT_TRUE(out.failure);
  EXPECT_EQ(out.failure->cause, FailureCause::kConnectFailed);
  EXPECT_TRUE(out.handoff_left_with_producer);
}

TEST_F(DecodeStreamTest, InterimAndResponseBoundsComeBeforeTransport) {
  DecodeStream a(opts_, consumer_, kT0, At(60), observer_);
  DecodeLegEnd interim;
  interim.interim_bound = "too many 1xx";
  DecodeOutcome out = a.Finish(std::move(interim));
  EXPECT_EQ(out.failure->cause, FailureCause::kResponseBound);
  EXPECT_EQ(out.failure->detail, "too many 1xx");
  DecodeStream b(opts_, consumer_, kT0, At(60), observer_);
  DecodeLegEnd bound;
  bound.response_bound = "headers too big";
  out = b.Finish(std::move(bound));
  EXPECT_EQ(out.failure->detail, "headers too big");
  EXPECT_EQ(out.failure->breaker_class, BreakerClass::kInferenceStatus);
}

}  // namespace
}  // namespace narwhal::engines
