// The one status table (server/status_table.h), row by row: every outcome's
// HTTP status, OpenAI error type, gRPC code, Retry-After and journal
// `status` (SPEC §4, §5, §6), and that every row of the table is reached.
#include "server/status_table.h"

#include <gtest/gtest.h>

#include <optional>
#include <set>
#include <string>

#include "engines/engine_failure.h"
#include "router/outcome.h"

namespace narwhal::server {
namespace {

using engines::FailureCause;
using engines::Phase;
using router::Outcome;
using router::Reason;
using router::Terminal;

// google.rpc.Code values.
constexpr int kOk = 0, kCancelled = 1, kInvalidArgument = 3, kDeadlineExceeded = 4, kNotFound = 5,
              kResourceExhausted = 8, kFailedPrecondition = 9, kInternal = 13, kUnavailable = 14,
              kUnauthenticated = 16;

struct Case {
  std::string name;
  Terminal terminal;
  Reason reason;
  Phase phase;
  bool output_started;
  FailureCause cause;
  int engine_status;
  // Expected.
  int http_status;
  std::string error_type;
  int grpc_code;
  bool retry_after;
  std::optional<int> journal_status;
};

Outcome OutcomeOf(const Case& c) {
  Outcome o;
  o.terminal = c.terminal;
  o.reason = c.reason;
  o.phase = c.phase;
  o.output_started = c.output_started;
  o.cause = c.cause;
  o.engine_status = c.engine_status;
  o.message = "detail";
  return o;
}

constexpr Phase kP = Phase::kPrefill;
constexpr Phase kD = Phase::kDecode;
constexpr FailureCause kNoCause = FailureCause::kNone;
constexpr FailureCause kStatus = FailureCause::kEngineStatus;
constexpr FailureCause kStream = FailureCause::kStreamError;
const Terminal kFailed = Terminal::kFailed;
const Terminal kInvalid = Terminal::kInvalid;
const Terminal kRejected = Terminal::kRejected;

// Every row of the table, and then some: each case names the row it
// exercises by its facts.
const Case kCases[] = {
    {"Completed", Terminal::kCompleted, Reason::kNone, kD, true, kNoCause, 0, 200, "", kOk, false,
     200},
    {"CancelledBeforeOutput", Terminal::kCancelled, Reason::kCancelled, kP, false, kNoCause, 0, 499,
     "", kCancelled, false, std::nullopt},
    {"CancelledAfterOutput", Terminal::kCancelled, Reason::kCancelled, kD, true, kNoCause, 0, 200,
     "", kCancelled, false, 200},
    {"Deadline", Terminal::kExpired, Reason::kDeadline, kP, false, kNoCause, 0, 504,
     "request_expired", kDeadlineExceeded, false, 504},
    {"DeadlineAfterOutput", Terminal::kExpired, Reason::kDeadline, kD, true,
     FailureCause::kClientTooSlow, 0, 504, "request_expired", kDeadlineExceeded, false, 504},
    {"HandoffExpired", Terminal::kExpired, Reason::kHandoffExpired, kD, false, kNoCause, 0, 504,
     "handoff_expired", kDeadlineExceeded, false, 504},
    {"EngineRejected400", kFailed, Reason::kEngineRejected, kP, false, kStatus, 400, 400,
     "invalid_request_error", kInvalidArgument, false, 400},
    {"EngineRejected413InStream", kFailed, Reason::kEngineRejected, kD, false, kStream, 413, 413,
     "invalid_request_error", kInvalidArgument, false, 413},
    // The client's own refusal keeps the code SPEC §6 gives its number.
    {"EngineRejected409", kFailed, Reason::kEngineRejected, kP, false, kStatus, 409, 409,
     "invalid_request_error", kFailedPrecondition, false, 409},
    {"EngineRejected422InStream", kFailed, Reason::kEngineRejected, kD, false, kStream, 422, 422,
     "invalid_request_error", kInvalidArgument, false, 422},
    {"ConnectTimeoutPrefill", kFailed, Reason::kEngineUnreachable, kP, false,
     FailureCause::kConnectTimeout, 0, 504, "prefill", kDeadlineExceeded, false, 504},
    {"ConnectTimeoutDecode", kFailed, Reason::kEngineUnreachable, kD, false,
     FailureCause::kConnectTimeout, 0, 504, "decode", kDeadlineExceeded, false, 504},
    {"ConnectRefusedPrefill", kFailed, Reason::kEngineUnreachable, kP, false,
     FailureCause::kConnectFailed, 0, 502, "prefill", kUnavailable, false, 502},
    {"BadUrlDecode", kFailed, Reason::kEngineUnreachable, kD, false, FailureCause::kBadUrl, 0, 502,
     "decode", kUnavailable, false, 502},
    {"ConnectionLostPrefill", kFailed, Reason::kEngineConnection, kP, false,
     FailureCause::kConnectionLost, 0, 502, "prefill", kUnavailable, false, 502},
    {"ConnectionLostDecode", kFailed, Reason::kEngineConnection, kD, false,
     FailureCause::kConnectionLost, 0, 502, "decode", kUnavailable, false, 502},
    {"Overload429InStreamPrefill", kFailed, Reason::kEngineOverloaded, kP, false, kStream, 429, 429,
     "prefill", kResourceExhausted, true, 429},
    // An engine's in-stream 408 is a fault of the leg that timed out, not a
    // client error: the gRPC column says DEADLINE_EXCEEDED, whatever the
    // HTTP number's own mapping would be.
    {"Overload408InStreamDecode", kFailed, Reason::kEngineOverloaded, kD, false, kStream, 408, 408,
     "decode", kDeadlineExceeded, false, 408},
    {"Overload408InStreamPrefill", kFailed, Reason::kEngineOverloaded, kP, false, kStream, 408, 408,
     "prefill", kDeadlineExceeded, false, 408},
    {"Overload408Prefill", kFailed, Reason::kEngineOverloaded, kP, false, kStatus, 408, 504,
     "prefill", kDeadlineExceeded, false, 504},
    {"Overload408Decode", kFailed, Reason::kEngineOverloaded, kD, false, kStatus, 408, 504,
     "decode", kDeadlineExceeded, false, 504},
    {"Overload429Prefill", kFailed, Reason::kEngineOverloaded, kP, false, kStatus, 429, 502,
     "prefill", kUnavailable, false, 502},
    {"Overload429Decode", kFailed, Reason::kEngineOverloaded, kD, false, kStatus, 429, 502,
     "decode", kUnavailable, false, 502},
    {"Timeout504InStreamPrefill", kFailed, Reason::kEngineTimeout, kP, false, kStream, 504, 504,
     "prefill", kDeadlineExceeded, false, 504},
    {"Timeout504InStreamDecode", kFailed, Reason::kEngineTimeout, kD, false, kStream, 504, 504,
     "decode", kDeadlineExceeded, false, 504},
    {"PrefillLegTimeout", kFailed, Reason::kEngineTimeout, kP, false, FailureCause::kLegTimeout, 0,
     504, "prefill", kDeadlineExceeded, false, 504},
    {"ReadTimeoutAfterOutput", kFailed, Reason::kEngineTimeout, kD, true,
     FailureCause::kReadTimeout, 0, 504, "decode", kDeadlineExceeded, false, 504},
    // An engine that refuses the router (its key, model or path) is a
    // fault of the leg, never the client's own 401/404.
    {"EngineRefusesRouter401Prefill", kFailed, Reason::kEngineError, kP, false,
     FailureCause::kEngineRefusedRouter, 401, 502, "prefill", kUnavailable, false, 502},
    {"EngineRefusesRouter404Decode", kFailed, Reason::kEngineError, kD, false,
     FailureCause::kEngineRefusedRouter, 404, 502, "decode", kUnavailable, false, 502},
    {"StreamError503Prefill", kFailed, Reason::kEngineError, kP, false, kStream, 503, 503,
     "prefill", kUnavailable, true, 503},
    {"StreamError500Decode", kFailed, Reason::kEngineError, kD, false, kStream, 500, 500, "decode",
     kInternal, false, 500},
    {"Engine503Prefill", kFailed, Reason::kEngineError, kP, false, kStatus, 503, 502, "prefill",
     kUnavailable, false, 502},
    {"UnterminatedDecode", kFailed, Reason::kEngineError, kD, false, FailureCause::kUnterminated, 0,
     502, "decode", kUnavailable, false, 502},
    {"NoHandoffPrefill", kFailed, Reason::kInvalidResponse, kP, false, FailureCause::kNoHandoff, 0,
     502, "prefill", kUnavailable, false, 502},
    {"InvalidContinuationDecode", kFailed, Reason::kInvalidResponse, kD, false,
     FailureCause::kInvalidContinuation, 0, 502, "decode", kUnavailable, false, 502},
    {"NoEngine", kFailed, Reason::kNoEngine, kP, false, kNoCause, 0, 503, "backend_unavailable",
     kUnavailable, true, 503},
    {"ShuttingDown", kRejected, Reason::kShuttingDown, kP, false, kNoCause, 0, 503,
     "backend_unavailable", kUnavailable, true, 503},
    {"InflightLimit", kRejected, Reason::kInflightLimit, kP, false, kNoCause, 0, 429,
     "rate_limit_error", kResourceExhausted, true, 429},
    {"TenantInflightLimit", kRejected, Reason::kTenantInflightLimit, kP, false, kNoCause, 0, 429,
     "rate_limit_error", kResourceExhausted, true, 429},
    {"TenantRateLimit", kRejected, Reason::kTenantRateLimit, kP, false, kNoCause, 0, 429,
     "rate_limit_error", kResourceExhausted, true, 429},
    {"Internal", kFailed, Reason::kInternal, kP, false, kNoCause, 0, 500, "internal_error",
     kInternal, false, 500},
    {"ContextLengthExceeded", kInvalid, Reason::kContextLengthExceeded, kP, false, kNoCause, 0, 400,
     "invalid_request_error", kInvalidArgument, false, 400},
    {"Unauthorized", kRejected, Reason::kUnauthorized, kP, false, kNoCause, 0, 401,
     "authentication_error", kUnauthenticated, false, 401},
    {"InvalidRequest", kInvalid, Reason::kInvalidRequest, kP, false, kNoCause, 0, 400,
     "invalid_request_error", kInvalidArgument, false, 400},
    {"ModelNotFound", kInvalid, Reason::kModelNotFound, kP, false, kNoCause, 0, 404,
     "invalid_request_error", kNotFound, false, 404},
    {"MalformedHttp", kInvalid, Reason::kMalformedHttp, kP, false, kNoCause, 0, 400,
     "invalid_request_error", kInvalidArgument, false, 400},
    {"MalformedMessage", kInvalid, Reason::kMalformedMessage, kP, false, kNoCause, 0, 400,
     "invalid_request_error", kInvalidArgument, false, 400},
    {"TooLarge", kInvalid, Reason::kTooLarge, kP, false, kNoCause, 0, 413, "invalid_request_error",
     kInvalidArgument, false, 413},
    {"HeaderTimeout", kInvalid, Reason::kHeaderTimeout, kP, false, kNoCause, 0, 408,
     "invalid_request_error", kInvalidArgument, false, 408},
    {"HeadersTooLarge", kInvalid, Reason::kHeadersTooLarge, kP, false, kNoCause, 0, 431,
     "invalid_request_error", kInvalidArgument, false, 431},
};

class StatusTableTest : public ::testing::TestWithParam<Case> {};

TEST_P(StatusTableTest, RowGivesEveryEdgeItsStatus) {
  const Case& c = GetParam();
  const Outcome o = OutcomeOf(c);
  ASSERT_LT(StatusTableRowOf(o), StatusTableRows()) << "no row: the fallback would apply";
  const EdgeStatus e = StatusFor(o);
  EXPECT_EQ(e.http_status, c.http_status);
  EXPECT_EQ(ErrorTypeName(e.error_type), c.error_type);
  EXPECT_EQ(e.grpc_code, c.grpc_code);
  EXPECT_EQ(e.retry_after_s > 0, c.retry_after);
  EXPECT_EQ(e.journal_status, c.journal_status);

  const StatusTableJournal journal{};
  EXPECT_EQ(journal.Status(o),
            c.journal_status ? nlohmann::json(*c.journal_status) : nlohmann::json(nullptr));
  EXPECT_EQ(journal.ErrorTypeOf(o),
            c.error_type.empty() ? nlohmann::json(nullptr) : nlohmann::json(c.error_type));
  const nlohmann::json body = OpenAiErrorBody(o);
  EXPECT_EQ(body["error"]["code"], c.http_status);
  EXPECT_EQ(body["error"]["type"], c.error_type);
  EXPECT_EQ(body["error"]["message"], "detail");
}

INSTANTIATE_TEST_SUITE_P(Rows, StatusTableTest, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.name;
                         });

TEST(StatusTableRetryAfterTest, AnOutcomesOwnWaitIsTheRetryAfterOf429And503Only) {
  Outcome o = router::RefusalOutcome(router::Terminal::kRejected, Reason::kTenantRateLimit, "x");
  EXPECT_EQ(StatusFor(o).retry_after_s, 1);  // no wait of its own: 1
  o.retry_after_s = 7;
  EXPECT_EQ(StatusFor(o).retry_after_s, 7);
  Outcome invalid =
      router::RefusalOutcome(router::Terminal::kInvalid, Reason::kInvalidRequest, "x");
  invalid.retry_after_s = 7;
  EXPECT_EQ(StatusFor(invalid).retry_after_s, 0);  // a 400 has none
}

TEST(StatusTableCoverageTest, EveryRowIsExercised) {
  std::set<size_t> hit;
  for (const Case& c : kCases) hit.insert(StatusTableRowOf(OutcomeOf(c)));
  for (size_t row = 0; row < StatusTableRows(); ++row) {
    EXPECT_EQ(hit.count(row), 1u) << "table row " << row << " has no case";
  }
}

TEST(StatusTableCoverageTest, EveryReasonHasARowInBothPhases) {
  for (int r = static_cast<int>(Reason::kNone); r <= static_cast<int>(Reason::kHeadersTooLarge);
       ++r) {
    for (const Phase phase : {kP, kD}) {
      Outcome o;
      o.reason = static_cast<Reason>(r);
      o.phase = phase;
      EXPECT_LT(StatusTableRowOf(o), StatusTableRows())
          << router::ReasonName(o.reason) << " " << engines::PhaseName(phase);
    }
  }
}

// The status of a failed leg alone (journal attempt_failures[].status):
// before any output, whatever the request's outcome.
TEST(StatusTableFailureTest, FailedLegStatusIsItsBeforeOutputStatus) {
  const engines::EngineFailure cancelled =
      engines::MakeFailure(kD, "d0", engines::FailureReason::kCancelled,
                           engines::BreakerClass::kNone, kNoCause, "client went away", false);
  EXPECT_EQ(FailureStatus(cancelled), 499);
  EXPECT_EQ(FailureStatus(engines::ClassifyEngineStatus(kP, "p0", 408, "slow", false)), 504);
  EXPECT_EQ(FailureStatus(engines::ClassifyEngineStatus(kP, "p0", 429, "busy", false)), 502);
  EXPECT_EQ(FailureStatus(engines::ClassifyEngineStatus(kD, "d0", 429, "busy", true)), 429);
  EXPECT_EQ(FailureStatus(engines::ClassifyEngineStatus(kP, "p0", 422, "no", false)), 422);
}

// After commit the terminal stream event carries the row's status and says
// decode unless the request expired (B16).
TEST(StatusTableStreamTest, TerminalEventNamesDecodeOrExpiry) {
  Outcome timeout;
  timeout.reason = Reason::kEngineTimeout;
  timeout.phase = kD;
  timeout.output_started = true;
  timeout.cause = FailureCause::kReadTimeout;
  timeout.message = "silent";
  EXPECT_EQ(TerminalStreamEvent(timeout),
            nlohmann::json::parse(R"({"error":{"message":"silent","type":"decode","code":504}})"));
  Outcome expired = timeout;
  expired.terminal = Terminal::kExpired;
  expired.reason = Reason::kDeadline;
  EXPECT_EQ(TerminalStreamEvent(expired)["error"]["type"], "request_expired");
}

}  // namespace
}  // namespace narwhal::server
