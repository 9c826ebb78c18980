#include "engines/engine_failure.h"

namespace narwhal::engines {

std::string_view PhaseName(Phase phase) {
  return phase == Phase::kPrefill ? "prefill" : "decode";
}

std::string_view BreakerClassName(BreakerClass c) {
  switch (c) {
    case BreakerClass::kNone:
      return "none";
    case BreakerClass::kConnection:
      return "connection";
    case BreakerClass::kTimeout:
      return "timeout";
    case BreakerClass::kOverload:
      return "overload";
    case BreakerClass::kInferenceStatus:
      return "inference_status";
    case BreakerClass::kKvHandoff:
      return "kv_handoff";
    case BreakerClass::kStream:
      return "stream";
    case BreakerClass::kLiveness:
      return "liveness";
  }
  return "none";
}

std::string_view FailureReasonName(FailureReason r) {
  switch (r) {
    case FailureReason::kEngineUnreachable:
      return "engine_unreachable";
    case FailureReason::kEngineConnection:
      return "engine_connection";
    case FailureReason::kEngineTimeout:
      return "engine_timeout";
    case FailureReason::kEngineOverloaded:
      return "engine_overloaded";
    case FailureReason::kEngineRejected:
      return "engine_rejected";
    case FailureReason::kEngineError:
      return "engine_error";
    case FailureReason::kInvalidResponse:
      return "invalid_response";
    case FailureReason::kDeadline:
      return "deadline";
    case FailureReason::kHandoffExpired:
      return "handoff";
    case FailureReason::kCancelled:
      return "cancelled";
  }
  return "engine_error";
}

}  // namespace narwhal::engines
