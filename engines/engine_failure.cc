#include "engines/engine_failure.h"

#include <nlohmann/json.hpp>

#include "engines/json_limits.h"

namespace narwhal::engines {
namespace {

constexpr size_t kMaxMessageChars = 500;

}  // namespace

EngineFailure MakeFailure(Phase phase, const std::string& iid, FailureReason reason,
                          BreakerClass cls, int status, std::string detail, bool transient) {
  EngineFailure f;
  f.phase = phase;
  f.iid = iid;
  f.evidence_iid = cls == BreakerClass::kNone ? "" : iid;
  f.reason = reason;
  f.breaker_class = cls;
  f.status = status;
  f.detail = std::move(detail);
  f.transient = transient;
  return f;
}

std::string EngineErrorMessage(const std::string& body) {
  std::string message;
  const nlohmann::json parsed = ParseJson(body);
  if (parsed.is_object()) {
    auto err = parsed.find("error");
    if (err != parsed.end() && err->is_object() && err->contains("message") &&
        (*err)["message"].is_string()) {
      message = (*err)["message"].get<std::string>();
    } else if (err != parsed.end() && err->is_string()) {
      message = err->get<std::string>();
    } else if (parsed.contains("message") && parsed["message"].is_string()) {
      message = parsed["message"].get<std::string>();
    }
  }
  if (message.empty()) message = body;
  if (message.size() > kMaxMessageChars) message = message.substr(0, kMaxMessageChars) + "...";
  return message;
}

EngineFailure ClassifyEngineStatus(Phase phase, const std::string& iid, int engine_status,
                                   const std::string& message, bool in_stream) {
  const std::string source = in_stream ? "engine stream error " : "engine returned HTTP ";
  const std::string detail = source + std::to_string(engine_status) + ": " + message;
  EngineFailure f;
  if (engine_status == 408 || engine_status == 429) {
    f = MakeFailure(phase, iid, FailureReason::kEngineOverloaded, BreakerClass::kOverload,
                    engine_status == 408 ? 504 : 502, detail, true);
  } else if (engine_status >= 400 && engine_status < 500) {
    // The client's own request was refused (e.g. prompt too long): its status
    // and message go back unchanged, and it is not evidence against the engine.
    f = MakeFailure(phase, iid, FailureReason::kEngineRejected, BreakerClass::kNone,
                    engine_status, message, false);
  } else if (engine_status >= 500 && engine_status < 600) {
    f = MakeFailure(phase, iid,
                    engine_status == 504 ? FailureReason::kEngineTimeout
                                         : FailureReason::kEngineError,
                    BreakerClass::kInferenceStatus, engine_status == 504 ? 504 : 502, detail,
                    true);
  } else {
    f = MakeFailure(phase, iid, FailureReason::kEngineError, BreakerClass::kInferenceStatus, 502,
                    detail, false);
  }
  // B11: an error object inside a 200 stream keeps its own status.
  if (in_stream) f.status = engine_status;
  f.engine_status = engine_status;
  return f;
}

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
