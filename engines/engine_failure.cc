#include "engines/engine_failure.h"

#include "engines/descriptor_contract.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "engines/json_limits.h"

namespace narwhal::engines {
namespace {

// Error bodies up to this size are parsed for their message; larger ones are
// taken as text (no document is built from an oversized body).
constexpr size_t kMaxParsedErrorBody = 64 * 1024;
constexpr std::string_view kEllipsis = "...";
constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// The length of the well-formed character at the start of [p, end), or 0
// when it is ill-formed; *subpart is then the length of the maximal subpart
// to replace by one U+FFFD (at least 1).
size_t CharLength(const unsigned char* p, const unsigned char* end, size_t* subpart) {
  const unsigned char b0 = p[0];
  if (b0 < 0x80) return 1;
  size_t len = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    if (b0 == 0xE0) lo = 0xA0;  // no overlongs
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    if (b0 == 0xF0) lo = 0x90;  // no overlongs
    if (b0 == 0xF4) hi = 0x8F;  // nothing past U+10FFFF
  } else {
    *subpart = 1;  // a continuation byte, C0/C1 or F5..FF
    return 0;
  }
  const size_t avail = static_cast<size_t>(end - p);
  for (size_t i = 1; i < len; ++i) {
    const unsigned char b = i < avail ? p[i] : 0;
    const bool ok = i < avail && (i == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF));
    if (!ok) {
      *subpart = i;
      return 0;
    }
  }
  return len;
}

}  // namespace

bool IsValidUtf8(std::string_view bytes) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  const auto* const end = p + bytes.size();
  while (p < end) {
    if (*p < 0x80) {
      ++p;
      continue;
    }
    size_t subpart = 0;
    const size_t len = CharLength(p, end, &subpart);
    if (len == 0) return false;
    p += len;
  }
  return true;
}

std::string ToValidUtf8(std::string_view bytes, size_t max_bytes, bool* truncated) {
  if (truncated != nullptr) *truncated = false;
  if (bytes.size() <= max_bytes && IsValidUtf8(bytes)) return std::string(bytes);
  std::string out;
  out.reserve(std::min(bytes.size(), max_bytes));
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  const auto* const end = p + bytes.size();
  while (p < end) {
    size_t subpart = 0;
    const size_t len = CharLength(p, end, &subpart);
    const size_t out_len = len == 0 ? kReplacement.size() : len;
    if (out.size() + out_len > max_bytes) {
      if (truncated != nullptr) *truncated = true;
      break;
    }
    if (len == 0) {
      out.append(kReplacement);
      p += subpart;
    } else {
      out.append(reinterpret_cast<const char*>(p), len);
      p += len;
    }
  }
  return out;
}

std::string EngineText(std::string_view bytes) {
  bool truncated = false;
  std::string text = ToValidUtf8(bytes, kMaxEngineTextBytes, &truncated);
  if (!truncated) return text;
  text = ToValidUtf8(bytes, kMaxEngineTextBytes - kEllipsis.size());
  text.append(kEllipsis);
  return text;
}

EngineFailure MakeFailure(Phase phase, const std::string& iid, FailureReason reason,
                          BreakerClass cls, FailureCause cause, std::string detail,
                          bool transient) {
  EngineFailure f;
  f.phase = phase;
  f.iid = iid;
  f.evidence_iid = cls == BreakerClass::kNone ? "" : iid;
  f.reason = reason;
  f.breaker_class = cls;
  f.cause = cause;
  f.detail = IsValidUtf8(detail) ? std::move(detail) : ToValidUtf8(detail);
  f.transient = transient;
  return f;
}

std::string EngineErrorMessage(const std::string& body) {
  std::string message;
  const nlohmann::json parsed =
      body.size() <= kMaxParsedErrorBody ? ParseJson(body) : nlohmann::json();
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
  return EngineText(message.empty() ? std::string_view(body) : std::string_view(message));
}

bool EngineRefusesRouter(int engine_status) {
  return engine_status == 401 || engine_status == 403 || engine_status == 404 ||
         engine_status == 405 || engine_status == 407;
}

EngineFailure ClassifyEngineStatus(Phase phase, const std::string& iid, int engine_status,
                                   const std::string& message, bool in_stream) {
  const std::string source = in_stream ? "engine stream error " : "engine returned HTTP ";
  const std::string text = EngineText(message);
  const std::string detail = source + std::to_string(engine_status) + ": " + text;
  const FailureCause cause = in_stream ? FailureCause::kStreamError : FailureCause::kEngineStatus;
  EngineFailure f;
  if (engine_status == 408 || engine_status == 429) {
    f = MakeFailure(phase, iid, FailureReason::kEngineOverloaded, BreakerClass::kOverload, cause,
                    detail, true);
  } else if (EngineRefusesRouter(engine_status)) {
    // The request reached the engine as the router built it (the client's
    // model and path were checked at the door): the engine's key, served
    // model or paths are not the router's. Evidence against the engine, and
    // another engine may serve the request.
    f = MakeFailure(phase, iid, FailureReason::kEngineError, BreakerClass::kInferenceStatus,
                    FailureCause::kEngineRefusedRouter,
                    detail +
                        " (the engine refuses the router: check engine.api_key_env, the "
                        "served model name and the engine's URL)",
                    true);
  } else if (engine_status >= 400 && engine_status < 500) {
    // The client's own request was refused (e.g. prompt too long): its status
    // and message go back unchanged, and it is not evidence against the engine.
    f = MakeFailure(phase, iid, FailureReason::kEngineRejected, BreakerClass::kNone, cause, text,
                    false);
  } else if (engine_status >= 500 && engine_status < 600) {
    f = MakeFailure(
        phase, iid,
        engine_status == 504 ? FailureReason::kEngineTimeout : FailureReason::kEngineError,
        BreakerClass::kInferenceStatus, cause, detail, true);
  } else {
    f = MakeFailure(phase, iid, FailureReason::kEngineError, BreakerClass::kInferenceStatus, cause,
                    detail, false);
  }
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

std::vector<std::string_view> HandoffRejectionReasons() {
  std::vector<std::string_view> out = DescriptorRejectionReasons();
  out.insert(out.end(), {"connector_mismatch", "endpoint_mismatch", "reused_handoff"});
  return out;
}

}  // namespace narwhal::engines
