#include "router/outcome.h"

#include "router/request.h"

namespace narwhal::router {

std::string_view TerminalName(Terminal t) {
  switch (t) {
    case Terminal::kCompleted:
      return "completed";
    case Terminal::kFailed:
      return "failed";
    case Terminal::kRejected:
      return "rejected";
    case Terminal::kExpired:
      return "expired";
    case Terminal::kInvalid:
      return "invalid";
    case Terminal::kCancelled:
      return "cancelled";
  }
  return "failed";
}

std::string_view ReasonName(Reason r) {
  switch (r) {
    case Reason::kNone:
      return "";
    case Reason::kEngineUnreachable:
      return "engine_unreachable";
    case Reason::kEngineConnection:
      return "engine_connection";
    case Reason::kEngineTimeout:
      return "engine_timeout";
    case Reason::kEngineOverloaded:
      return "engine_overloaded";
    case Reason::kEngineRejected:
      return "engine_rejected";
    case Reason::kEngineError:
      return "engine_error";
    case Reason::kInvalidResponse:
      return "invalid_response";
    case Reason::kDeadline:
      return "deadline";
    case Reason::kHandoffExpired:
      return "handoff";
    case Reason::kCancelled:
      return "cancelled";
    case Reason::kNoEngine:
      return "no_engine";
    case Reason::kShuttingDown:
      return "shutting_down";
    case Reason::kInflightLimit:
      return "inflight_limit";
    case Reason::kTenantInflightLimit:
      return "tenant_inflight_limit";
    case Reason::kTenantRateLimit:
      return "tenant_rate_limit";
    case Reason::kInternal:
      return "internal";
    case Reason::kContextLengthExceeded:
      return "context_length_exceeded";
    case Reason::kUnauthorized:
      return "unauthorized";
    case Reason::kInvalidRequest:
      return "invalid_request";
    case Reason::kModelNotFound:
      return "model_not_found";
    case Reason::kMalformedHttp:
      return "malformed_http";
    case Reason::kMalformedMessage:
      return "malformed_message";
    case Reason::kTooLarge:
      return "too_large";
    case Reason::kHeaderTimeout:
      return "header_timeout";
    case Reason::kHeadersTooLarge:
      return "headers_too_large";
  }
  return "internal";
}

Reason ReasonOf(engines::FailureReason r) {
  using engines::FailureReason;
  switch (r) {
    case FailureReason::kEngineUnreachable:
      return Reason::kEngineUnreachable;
    case FailureReason::kEngineConnection:
      return Reason::kEngineConnection;
    case FailureReason::kEngineTimeout:
      return Reason::kEngineTimeout;
    case FailureReason::kEngineOverloaded:
      return Reason::kEngineOverloaded;
    case FailureReason::kEngineRejected:
      return Reason::kEngineRejected;
    case FailureReason::kEngineError:
      return Reason::kEngineError;
    case FailureReason::kInvalidResponse:
      return Reason::kInvalidResponse;
    case FailureReason::kDeadline:
      return Reason::kDeadline;
    case FailureReason::kHandoffExpired:
      return Reason::kHandoffExpired;
    case FailureReason::kCancelled:
      return Reason::kCancelled;
  }
  return Reason::kEngineError;
}

Outcome FailureOutcome(const engines::EngineFailure& f, bool output_started) {
  using engines::FailureReason;
  Outcome o;
  o.reason = ReasonOf(f.reason);
  o.phase = f.phase;
  o.cause = f.cause;
  o.engine_status = f.engine_status;
  o.message = f.detail;
  o.output_started = output_started;
  switch (f.reason) {
    case FailureReason::kCancelled:
      o.terminal = Terminal::kCancelled;
      break;
    case FailureReason::kDeadline:
    case FailureReason::kHandoffExpired:
      o.terminal = Terminal::kExpired;
      break;
    default:
      o.terminal = Terminal::kFailed;
      break;
  }
  return o;
}

Outcome RefusalOutcome(Terminal terminal, Reason reason, std::string message) {
  Outcome o;
  o.terminal = terminal;
  o.reason = reason;
  o.message = std::move(message);
  return o;
}

std::string_view DoorName(Door door) { return door == Door::kHttp ? "http" : "grpc"; }

}  // namespace narwhal::router
