// The one status table (SPEC §4, §5, §6): how an outcome leaves each edge.
//
// The router reports what happened (router::Outcome: terminal, reason,
// phase, output_started, the engine's own status as data); one table here
// maps reason × phase × output_started to the HTTP status and OpenAI error
// type, the gRPC code and ErrorInfo, Retry-After and the journal `status`.
// No other file chooses a status for an outcome, and no HTTP or gRPC number
// appears below server/.
//
// The journal is written in router/: the server hands the router a
// StatusTableJournal (a router::JournalStatus reading this table) at
// construction, so the row carries the status the client saw.
#ifndef NARWHAL_SERVER_STATUS_TABLE_H_
#define NARWHAL_SERVER_STATUS_TABLE_H_

#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "engines/engine_failure.h"
#include "router/outcome.h"

namespace narwhal::server {

// OpenAI error `type` (SPEC §4).
enum class ErrorType {
  kNone,
  kInvalidRequest,      // invalid_request_error (400/404/413, engine 4xx)
  kRateLimit,           // rate_limit_error (429)
  kBackendUnavailable,  // backend_unavailable (503)
  kPrefill,             // prefill (engine fault in the prefill leg)
  kDecode,              // decode (engine fault in the decode leg)
  kRequestExpired,      // request_expired (deadline)
  kHandoffExpired,      // handoff_expired (B7)
  kUnauthorized,        // authentication_error (401, missing/wrong API key)
  kInternal,            // internal_error (500)
};
std::string_view ErrorTypeName(ErrorType t);  // kNone -> ""

// How one outcome leaves the front doors.
struct EdgeStatus {
  // The HTTP response status; after commit (output started) the `code` of
  // the terminal stream event.
  int http_status = 200;
  ErrorType error_type = ErrorType::kNone;
  int grpc_code = 0;  // google.rpc.Code
  // `Retry-After` in seconds (429 and 503; gRPC ErrorInfo.retry_after_s): the
  // outcome's own wait when it knows one (a tenant's bucket), else 1; 0 = none.
  int retry_after_s = 0;
  // The journal `status`: absent when no status reached the client (a
  // client that went away before any output).
  std::optional<int> journal_status;
};

// The table's answer for `outcome`.
EdgeStatus StatusFor(const router::Outcome& outcome);
// Whether a response with this HTTP status carries `Retry-After: 1` (429
// and 503): the one decision, for outcomes and for the door's own answers
// that have none (the connection cap, unknown routes).
bool RetryAfterFor(int http_status);
// The status a failed engine leg would give its client before any output
// (journal attempt_failures[].status, the Python binding's `status`).
int FailureStatus(const engines::EngineFailure& failure);

// For the table test: the number of rows, and the row `outcome` takes
// (StatusTableRows() when none matches and the 502 fallback applies).
size_t StatusTableRows();
size_t StatusTableRowOf(const router::Outcome& outcome);

// The journal's view of the table (injected into the router).
class StatusTableJournal final : public router::JournalStatus {
 public:
  nlohmann::json Status(const router::Outcome& outcome) const override;
  nlohmann::json ErrorTypeOf(const router::Outcome& outcome) const override;
  int AttemptStatus(const engines::EngineFailure& failure) const override;
};

// {"error": {"message", "type", "param", "code": status}} (SPEC §4).
nlohmann::json OpenAiErrorBody(int status, ErrorType type, const std::string& message,
                               const std::string& param = "");
nlohmann::json OpenAiErrorBody(const router::Outcome& outcome);

// The last event of a stream that failed after commit (B16):
// {"error": {"message", "type": "decode"|"request_expired", "code": status}}.
nlohmann::json TerminalStreamEvent(const router::Outcome& outcome);

// SPEC §6: 400/413 INVALID_ARGUMENT, 401 UNAUTHENTICATED, 404 NOT_FOUND,
// 429 RESOURCE_EXHAUSTED, 502/503 UNAVAILABLE, 504 DEADLINE_EXCEEDED,
// 500 INTERNAL, client cancel CANCELLED; other 4xx INVALID_ARGUMENT (or
// FAILED_PRECONDITION for 409/412), other 5xx UNAVAILABLE. Returns the
// numeric google.rpc.Code.
int GrpcCodeForStatus(int http_status, router::Terminal terminal);

}  // namespace narwhal::server

#endif  // NARWHAL_SERVER_STATUS_TABLE_H_
