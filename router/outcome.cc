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

std::string_view DoorName(Door door) { return door == Door::kHttp ? "http" : "grpc"; }

}  // namespace narwhal::router
