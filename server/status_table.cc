#include "server/status_table.h"

#include <algorithm>
#include <array>

namespace narwhal::server {
namespace {

using json = nlohmann::json;
using engines::FailureCause;
using engines::Phase;
using router::Reason;

// A row's status: a fixed number, or the engine's own (its 4xx refusal, or
// the code of an error object in its stream, B11).
constexpr int kEngineOwn = -1;

// The gRPC column: a google.rpc.Code, or one derived from the engine's own
// number where the row shows it (kEngineOwn).
enum class Grpc {
  kOk = 0,
  kCancelled = 1,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kResourceExhausted = 8,
  kInternal = 13,
  kUnavailable = 14,
  kUnauthenticated = 16,
  // The engine refused the client's own request (its 4xx goes back): the
  // code SPEC §6 gives that number.
  kClientsOwn = -1,
  // A fault of the leg carrying the engine's number (an error object in its
  // stream, B11): 429 RESOURCE_EXHAUSTED, 408 and 504 DEADLINE_EXCEEDED, 500
  // INTERNAL, anything else UNAVAILABLE (never a client-error code: the
  // engine failed, not the request).
  kFaultsOwn = -2,
};

// One row: the first row whose matches all hold decides. An absent match
// matches anything.
struct Row {
  Reason reason;
  std::optional<Phase> phase;
  std::optional<bool> output_started;
  std::optional<FailureCause> cause;
  int engine_status;  // 0 = any
  int http_status;    // or kEngineOwn
  ErrorType type;
  bool journal_status;  // false: the journal `status` is null
  Grpc grpc;
};

constexpr std::optional<Phase> kAnyPhase = std::nullopt;
constexpr std::optional<bool> kAnyOutput = std::nullopt;
constexpr std::optional<FailureCause> kAnyCause = std::nullopt;
constexpr Phase kP = Phase::kPrefill;
constexpr Phase kD = Phase::kDecode;

constexpr auto kTable = std::to_array<Row>({
    // Completed.
    {Reason::kNone, kAnyPhase, kAnyOutput, kAnyCause, 0, 200, ErrorType::kNone, true, Grpc::kOk},
    // The client went away (B19): no status reached it unless output had.
    {Reason::kCancelled, kAnyPhase, false, kAnyCause, 0, 499, ErrorType::kNone, false,
     Grpc::kCancelled},
    {Reason::kCancelled, kAnyPhase, true, kAnyCause, 0, 200, ErrorType::kNone, true,
     Grpc::kCancelled},
    // The router's own bounds.
    {Reason::kDeadline, kAnyPhase, kAnyOutput, kAnyCause, 0, 504, ErrorType::kRequestExpired, true,
     Grpc::kDeadlineExceeded},
    {Reason::kHandoffExpired, kAnyPhase, kAnyOutput, kAnyCause, 0, 504, ErrorType::kHandoffExpired,
     true, Grpc::kDeadlineExceeded},
    // The engine refused the client's own request: its status goes back.
    {Reason::kEngineRejected, kAnyPhase, kAnyOutput, kAnyCause, 0, kEngineOwn,
     ErrorType::kInvalidRequest, true, Grpc::kClientsOwn},
    // Engine faults (B10), typed by their leg: 504 when timeout-shaped,
    // else 502; an error object in a 200 stream keeps its own code (B11).
    {Reason::kEngineUnreachable, kP, kAnyOutput, FailureCause::kConnectTimeout, 0, 504,
     ErrorType::kPrefill, true, Grpc::kDeadlineExceeded},
    {Reason::kEngineUnreachable, kD, kAnyOutput, FailureCause::kConnectTimeout, 0, 504,
     ErrorType::kDecode, true, Grpc::kDeadlineExceeded},
    {Reason::kEngineUnreachable, kP, kAnyOutput, kAnyCause, 0, 502, ErrorType::kPrefill, true,
     Grpc::kUnavailable},
    {Reason::kEngineUnreachable, kD, kAnyOutput, kAnyCause, 0, 502, ErrorType::kDecode, true,
     Grpc::kUnavailable},
    {Reason::kEngineConnection, kP, kAnyOutput, kAnyCause, 0, 502, ErrorType::kPrefill, true,
     Grpc::kUnavailable},
    {Reason::kEngineConnection, kD, kAnyOutput, kAnyCause, 0, 502, ErrorType::kDecode, true,
     Grpc::kUnavailable},
    {Reason::kEngineOverloaded, kP, kAnyOutput, FailureCause::kStreamError, 0, kEngineOwn,
     ErrorType::kPrefill, true, Grpc::kFaultsOwn},
    {Reason::kEngineOverloaded, kD, kAnyOutput, FailureCause::kStreamError, 0, kEngineOwn,
     ErrorType::kDecode, true, Grpc::kFaultsOwn},
    {Reason::kEngineOverloaded, kP, kAnyOutput, kAnyCause, 408, 504, ErrorType::kPrefill, true,
     Grpc::kDeadlineExceeded},
    {Reason::kEngineOverloaded, kD, kAnyOutput, kAnyCause, 408, 504, ErrorType::kDecode, true,
     Grpc::kDeadlineExceeded},
    {Reason::kEngineOverloaded, kP, kAnyOutput, kAnyCause, 0, 502, ErrorType::kPrefill, true,
     Grpc::kUnavailable},
    {Reason::kEngineOverloaded, kD, kAnyOutput, kAnyCause, 0, 502, ErrorType::kDecode, true,
     Grpc::kUnavailable},
    {Reason::kEngineTimeout, kP, kAnyOutput, FailureCause::kStreamError, 0, kEngineOwn,
     ErrorType::kPrefill, true, Grpc::kFaultsOwn},
    {Reason::kEngineTimeout, kD, kAnyOutput, FailureCause::kStreamError, 0, kEngineOwn,
     ErrorType::kDecode, true, Grpc::kFaultsOwn},
    {Reason::kEngineTimeout, kP, kAnyOutput, kAnyCause, 0, 504, ErrorType::kPrefill, true,
     Grpc::kDeadlineExceeded},
    {Reason::kEngineTimeout, kD, kAnyOutput, kAnyCause, 0, 504, ErrorType::kDecode, true,
     Grpc::kDeadlineExceeded},
    // The engine refused the router (its key, model or paths): a fault of
    // the leg, never shown as the client's own 401/404.
    {Reason::kEngineError, kP, kAnyOutput, FailureCause::kEngineRefusedRouter, 0, 502,
     ErrorType::kPrefill, true, Grpc::kUnavailable},
    {Reason::kEngineError, kD, kAnyOutput, FailureCause::kEngineRefusedRouter, 0, 502,
     ErrorType::kDecode, true, Grpc::kUnavailable},
    {Reason::kEngineError, kP, kAnyOutput, FailureCause::kStreamError, 0, kEngineOwn,
     ErrorType::kPrefill, true, Grpc::kFaultsOwn},
    {Reason::kEngineError, kD, kAnyOutput, FailureCause::kStreamError, 0, kEngineOwn,
     ErrorType::kDecode, true, Grpc::kFaultsOwn},
    {Reason::kEngineError, kP, kAnyOutput, kAnyCause, 0, 502, ErrorType::kPrefill, true,
     Grpc::kUnavailable},
    {Reason::kEngineError, kD, kAnyOutput, kAnyCause, 0, 502, ErrorType::kDecode, true,
     Grpc::kUnavailable},
    {Reason::kInvalidResponse, kP, kAnyOutput, kAnyCause, 0, 502, ErrorType::kPrefill, true,
     Grpc::kUnavailable},
    {Reason::kInvalidResponse, kD, kAnyOutput, kAnyCause, 0, 502, ErrorType::kDecode, true,
     Grpc::kUnavailable},
    // Refused or ended by the router.
    {Reason::kNoEngine, kAnyPhase, kAnyOutput, kAnyCause, 0, 503, ErrorType::kBackendUnavailable,
     true, Grpc::kUnavailable},
    {Reason::kShuttingDown, kAnyPhase, kAnyOutput, kAnyCause, 0, 503,
     ErrorType::kBackendUnavailable, true, Grpc::kUnavailable},
    {Reason::kInflightLimit, kAnyPhase, kAnyOutput, kAnyCause, 0, 429, ErrorType::kRateLimit, true,
     Grpc::kResourceExhausted},
    {Reason::kTenantInflightLimit, kAnyPhase, kAnyOutput, kAnyCause, 0, 429, ErrorType::kRateLimit,
     true, Grpc::kResourceExhausted},
    {Reason::kTenantRateLimit, kAnyPhase, kAnyOutput, kAnyCause, 0, 429, ErrorType::kRateLimit,
     true, Grpc::kResourceExhausted},
    {Reason::kInternal, kAnyPhase, kAnyOutput, kAnyCause, 0, 500, ErrorType::kInternal, true,
     Grpc::kInternal},
    {Reason::kContextLengthExceeded, kAnyPhase, kAnyOutput, kAnyCause, 0, 400,
     ErrorType::kInvalidRequest, true, Grpc::kInvalidArgument},
    // Refused by a front door.
    {Reason::kUnauthorized, kAnyPhase, kAnyOutput, kAnyCause, 0, 401, ErrorType::kUnauthorized,
     true, Grpc::kUnauthenticated},
    {Reason::kInvalidRequest, kAnyPhase, kAnyOutput, kAnyCause, 0, 400, ErrorType::kInvalidRequest,
     true, Grpc::kInvalidArgument},
    {Reason::kModelNotFound, kAnyPhase, kAnyOutput, kAnyCause, 0, 404, ErrorType::kInvalidRequest,
     true, Grpc::kNotFound},
    {Reason::kMalformedHttp, kAnyPhase, kAnyOutput, kAnyCause, 0, 400, ErrorType::kInvalidRequest,
     true, Grpc::kInvalidArgument},
    {Reason::kMalformedMessage, kAnyPhase, kAnyOutput, kAnyCause, 0, 400,
     ErrorType::kInvalidRequest, true, Grpc::kInvalidArgument},
    {Reason::kTooLarge, kAnyPhase, kAnyOutput, kAnyCause, 0, 413, ErrorType::kInvalidRequest, true,
     Grpc::kInvalidArgument},
    {Reason::kHeaderTimeout, kAnyPhase, kAnyOutput, kAnyCause, 0, 408, ErrorType::kInvalidRequest,
     true, Grpc::kInvalidArgument},
    {Reason::kHeadersTooLarge, kAnyPhase, kAnyOutput, kAnyCause, 0, 431, ErrorType::kInvalidRequest,
     true, Grpc::kInvalidArgument},
});

// The index of the first row that matches, else kTable.size().
size_t RowIndex(Reason reason, Phase phase, bool output_started, FailureCause cause,
                int engine_status) {
  for (size_t i = 0; i < kTable.size(); ++i) {
    const Row& row = kTable[i];
    if (row.reason != reason) continue;
    if (row.phase && *row.phase != phase) continue;
    if (row.output_started && *row.output_started != output_started) continue;
    if (row.cause && *row.cause != cause) continue;
    if (row.engine_status != 0 && row.engine_status != engine_status) continue;
    return i;
  }
  return kTable.size();
}

// The row for an outcome with these facts; the last resort is a 502 fault
// of the leg (no reason lacks a row: the table test checks).
const Row& Lookup(Reason reason, Phase phase, bool output_started, FailureCause cause,
                  int engine_status) {
  const size_t i = RowIndex(reason, phase, output_started, cause, engine_status);
  if (i < kTable.size()) return kTable[i];
  static constexpr Row kFallbackPrefill{
      Reason::kEngineError, kP,   kAnyOutput,        kAnyCause, 0, 502,
      ErrorType::kPrefill,  true, Grpc::kUnavailable};
  static constexpr Row kFallbackDecode{
      Reason::kEngineError, kD,   kAnyOutput,        kAnyCause, 0, 502,
      ErrorType::kDecode,   true, Grpc::kUnavailable};
  return phase == kP ? kFallbackPrefill : kFallbackDecode;
}

int RowStatus(const Row& row, int engine_status) {
  return row.http_status == kEngineOwn ? engine_status : row.http_status;
}

// The row's gRPC code; `http_status` is the number the row shows.
int RowGrpcCode(const Row& row, int http_status) {
  switch (row.grpc) {
    case Grpc::kClientsOwn:
      return GrpcCodeForStatus(http_status, router::Terminal::kFailed);
    case Grpc::kFaultsOwn:
      switch (http_status) {
        case 429:
          return static_cast<int>(Grpc::kResourceExhausted);
        case 408:
        case 504:
          return static_cast<int>(Grpc::kDeadlineExceeded);
        case 500:
          return static_cast<int>(Grpc::kInternal);
        default:
          return static_cast<int>(Grpc::kUnavailable);
      }
    default:
      return static_cast<int>(row.grpc);
  }
}

}  // namespace

std::string_view ErrorTypeName(ErrorType t) {
  switch (t) {
    case ErrorType::kNone:
      return "";
    case ErrorType::kInvalidRequest:
      return "invalid_request_error";
    case ErrorType::kRateLimit:
      return "rate_limit_error";
    case ErrorType::kBackendUnavailable:
      return "backend_unavailable";
    case ErrorType::kPrefill:
      return "prefill";
    case ErrorType::kDecode:
      return "decode";
    case ErrorType::kRequestExpired:
      return "request_expired";
    case ErrorType::kHandoffExpired:
      return "handoff_expired";
    case ErrorType::kUnauthorized:
      return "authentication_error";
    case ErrorType::kInternal:
      return "internal_error";
  }
  return "internal_error";
}

EdgeStatus StatusFor(const router::Outcome& outcome) {
  const Row& row = Lookup(outcome.reason, outcome.phase, outcome.output_started, outcome.cause,
                          outcome.engine_status);
  EdgeStatus e;
  e.http_status = RowStatus(row, outcome.engine_status);
  e.error_type = row.type;
  e.grpc_code = RowGrpcCode(row, e.http_status);
  e.retry_after_s = RetryAfterFor(e.http_status) ? std::max(1, outcome.retry_after_s) : 0;
  if (row.journal_status) e.journal_status = e.http_status;
  return e;
}

bool RetryAfterFor(int http_status) { return http_status == 429 || http_status == 503; }

size_t StatusTableRows() { return kTable.size(); }

size_t StatusTableRowOf(const router::Outcome& outcome) {
  return RowIndex(outcome.reason, outcome.phase, outcome.output_started, outcome.cause,
                  outcome.engine_status);
}

int FailureStatus(const engines::EngineFailure& failure) {
  const Row& row = Lookup(router::ReasonOf(failure.reason), failure.phase,
                          /*output_started=*/false, failure.cause, failure.engine_status);
  return RowStatus(row, failure.engine_status);
}

json StatusTableJournal::Status(const router::Outcome& outcome) const {
  const EdgeStatus e = StatusFor(outcome);
  return e.journal_status ? json(*e.journal_status) : json(nullptr);
}

json StatusTableJournal::ErrorTypeOf(const router::Outcome& outcome) const {
  const ErrorType type = StatusFor(outcome).error_type;
  return type == ErrorType::kNone ? json(nullptr) : json(ErrorTypeName(type));
}

int StatusTableJournal::AttemptStatus(const engines::EngineFailure& failure) const {
  return FailureStatus(failure);
}

json OpenAiErrorBody(int status, ErrorType type, const std::string& message,
                     const std::string& param) {
  return {{"error",
           {{"message", message},
            {"type", ErrorTypeName(type)},
            {"param", param.empty() ? json(nullptr) : json(param)},
            {"code", status}}}};
}

json OpenAiErrorBody(const router::Outcome& outcome) {
  const EdgeStatus e = StatusFor(outcome);
  return OpenAiErrorBody(e.http_status, e.error_type, outcome.message);
}

json TerminalStreamEvent(const router::Outcome& outcome) {
  const EdgeStatus e = StatusFor(outcome);
  const ErrorType type =
      e.error_type == ErrorType::kRequestExpired ? ErrorType::kRequestExpired : ErrorType::kDecode;
  return {{"error",
           {{"message", outcome.message}, {"type", ErrorTypeName(type)}, {"code", e.http_status}}}};
}

int GrpcCodeForStatus(int http_status, router::Terminal terminal) {
  // google.rpc.Code values.
  constexpr int kCancelled = 1, kInvalidArgument = 3, kDeadlineExceeded = 4, kNotFound = 5,
                kFailedPrecondition = 9, kResourceExhausted = 8, kInternal = 13, kUnavailable = 14,
                kUnauthenticated = 16, kOk = 0;
  if (terminal == router::Terminal::kCancelled) return kCancelled;
  if (http_status >= 200 && http_status < 300) return kOk;
  switch (http_status) {
    case 400:
    case 413:
      return kInvalidArgument;
    case 401:
      return kUnauthenticated;
    case 404:
      return kNotFound;
    case 409:
    case 412:
      return kFailedPrecondition;
    case 429:
      return kResourceExhausted;
    case 500:
      return kInternal;
    case 502:
    case 503:
      return kUnavailable;
    case 504:
      return kDeadlineExceeded;
    default:
      break;
  }
  if (http_status >= 400 && http_status < 500) return kInvalidArgument;
  return kUnavailable;
}

}  // namespace narwhal::server
