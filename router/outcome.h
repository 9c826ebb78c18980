// What the router reports about a client request when it ends.
//
// The router decides the HTTP status and OpenAI error `type` of every outcome
// (SPEC §4 table); the front doors only translate them through the one status
// table in server/status_table.
#ifndef NARWHAL_ROUTER_OUTCOME_H_
#define NARWHAL_ROUTER_OUTCOME_H_

#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace narwhal::router {

// Journal `terminal` (SPEC §9).
enum class Terminal { kCompleted, kFailed, kRejected, kExpired, kInvalid, kCancelled };
std::string_view TerminalName(Terminal t);

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
std::string_view ErrorTypeName(ErrorType t);

struct Outcome {
  Terminal terminal = Terminal::kFailed;
  std::string reason;  // journal `reason` ("" when completed)
  int status = 200;    // HTTP status, or the terminal event's code after commit
  ErrorType error_type = ErrorType::kNone;
  std::string message;  // error detail; starts with the SPEC §5 detail text
  bool output_started = false;  // client-visible output had been sent (B16)

  // B9, seconds from arrival; absent when the leg never got there.
  std::optional<double> ttft_s;
  std::optional<double> first_byte_s;
  long long output_tokens = 0;
  long long prompt_tokens = -1;  // from the engine's usage when reported
  std::string finish_reason;

  // Non-streaming requests that completed: the assembled OpenAI response.
  nlohmann::json body;

  bool ok() const { return terminal == Terminal::kCompleted; }
};

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_OUTCOME_H_
