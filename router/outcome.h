// What the router reports about a client request when it ends.
//
// An Outcome says what happened — terminal, typed reason, the leg's phase,
// whether output had started, the detail — and never how a client sees it:
// the HTTP status, OpenAI error type, gRPC code, Retry-After and journal
// `status` of every outcome come from the one status table in
// server/status_table. No HTTP or gRPC number appears in router/ or engines/.
#ifndef NARWHAL_ROUTER_OUTCOME_H_
#define NARWHAL_ROUTER_OUTCOME_H_

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "engines/engine_failure.h"

namespace narwhal::router {

// Journal `terminal` (SPEC §9).
enum class Terminal { kCompleted, kFailed, kRejected, kExpired, kInvalid, kCancelled };
std::string_view TerminalName(Terminal t);
inline constexpr Terminal kTerminals[] = {Terminal::kCompleted, Terminal::kFailed,
                                          Terminal::kRejected,  Terminal::kExpired,
                                          Terminal::kInvalid,   Terminal::kCancelled};

// Journal `reason` (SPEC §9): why a request did not complete.
enum class Reason {
  kNone,  // completed
  // An engine leg failed (engines::FailureReason, same names).
  kEngineUnreachable,
  kEngineConnection,
  kEngineTimeout,
  kEngineOverloaded,
  kEngineRejected,
  kEngineError,
  kInvalidResponse,
  kDeadline,
  kHandoffExpired,
  kCancelled,
  // Refused or ended by the router.
  kNoEngine,               // no engine left to place a leg on
  kShuttingDown,           // draining
  kInflightLimit,          // serving.max_inflight
  kTenantInflightLimit,    // serving.api_keys[].max_inflight
  kTenantRateLimit,        // serving.api_keys[].requests_per_s
  kInternal,               // a router bug ended the request
  kContextLengthExceeded,  // the request cannot fit the model's max_model_len
  // Refused by a front door before the core.
  kUnauthorized,      // missing or wrong API key
  kInvalidRequest,    // the body breaks a request rule
  kModelNotFound,     // the body names another model
  kMalformedHttp,     // the HTTP request does not parse
  kMalformedMessage,  // the gRPC message does not parse
  kTooLarge,          // the body exceeds serving.max_request_bytes
  kHeaderTimeout,     // the header block did not arrive in time
  kHeadersTooLarge,   // the header block exceeds its bound
};
std::string_view ReasonName(Reason r);  // "engine_unreachable", ...; kNone -> ""
Reason ReasonOf(engines::FailureReason r);

struct Outcome {
  Terminal terminal = Terminal::kFailed;
  Reason reason = Reason::kNone;
  // The leg an engine failure happened in, its sub-reason and the engine's
  // own status (data; 0 when it sent none).
  engines::Phase phase = engines::Phase::kPrefill;
  engines::FailureCause cause = engines::FailureCause::kNone;
  int engine_status = 0;
  std::string message;          // error detail; starts with the SPEC §5 detail text
  std::string param;            // the request field at fault (OpenAI `param`), "" when none
  bool output_started = false;  // client-visible output had been sent (B16)
  // A refusal's wait before a retry, in seconds, where it knows one (a
  // tenant's token bucket); 0 = the status table's default.
  int retry_after_s = 0;

  // B9, seconds from arrival; absent when the leg never got there.
  std::optional<double> ttft_s;
  std::optional<double> first_byte_s;
  long long output_tokens = 0;
  long long prompt_tokens = -1;  // from the engine's usage when reported
  long long cached_tokens = -1;  // usage.prompt_tokens_details.cached_tokens when reported
  std::string finish_reason;

  // Non-streaming requests that completed: the assembled OpenAI response.
  nlohmann::json body;

  bool ok() const { return terminal == Terminal::kCompleted; }
};

// The outcome of a request that ends with engine-leg failure `f` (SPEC §4
// "situation": terminal and reason).
Outcome FailureOutcome(const engines::EngineFailure& f, bool output_started);

// A request refused or ended without an engine failure.
Outcome RefusalOutcome(Terminal terminal, Reason reason, std::string message);

// The client edge's view of an outcome, as far as the journal records it:
// the server's status table, injected into the router at construction.
class JournalStatus {
 public:
  virtual ~JournalStatus() = default;
  // `status`: the number the client saw, or null.
  virtual nlohmann::json Status(const Outcome& outcome) const = 0;
  // `error_type`: the OpenAI error type, or null.
  virtual nlohmann::json ErrorTypeOf(const Outcome& outcome) const = 0;
  // attempt_failures[].status: what the failed leg alone would have given.
  virtual int AttemptStatus(const engines::EngineFailure& failure) const = 0;
};

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_OUTCOME_H_
