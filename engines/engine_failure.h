// The one typed failure record of an engine leg.
//
// The engine adapter classifies every way a leg can fail exactly once, into
// this record; the attempt loop (retry decisions), the breaker (evidence), the
// journal and the metrics all read it. It says what happened (reason, cause,
// the engine's own status as data) and never which status a client sees: the
// front doors map the router's outcome through the one status table
// (server/status_table). Nothing else re-derives a classification.
#ifndef NARWHAL_ENGINES_ENGINE_FAILURE_H_
#define NARWHAL_ENGINES_ENGINE_FAILURE_H_

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace narwhal::engines {

enum class Phase { kPrefill, kDecode };
std::string_view PhaseName(Phase phase);  // "prefill" / "decode"

// Breaker evidence class (reference behaviour §8). kNone = not evidence
// against any engine (client 4xx, cancellation, the request's own deadline).
enum class BreakerClass {
  kNone,
  kConnection,       // connect refused / connect timeout -> eject
  kTimeout,          // transport timeout, connection dropped after send -> health probe
  kOverload,         // HTTP 408/429, first-token deadline with metadata flowing -> health probe
  kInferenceStatus,  // other HTTP 5xx, 5xx error object in a 200 stream -> inference hold
  kKvHandoff,        // unreadable or invalid KV handoff (counts against the producer)
  kStream,           // silent first token, mid-stream silence, invalid termination
  kLiveness,         // failed idle health sweeps (recorded by the fleet monitor)
};
inline constexpr int kBreakerClassCount = 8;
std::string_view BreakerClassName(BreakerClass c);  // "connection", ...; kNone -> "none"

// Journal `reason` of a failure (SPEC §9, reference §12).
enum class FailureReason {
  kEngineUnreachable,  // connect refused or timed out
  kEngineConnection,   // an established connection broke before a response
  kEngineTimeout,      // engine 504, prefill timeout, first-token or between-token timeout
  kEngineOverloaded,   // engine 408/429
  kEngineRejected,     // engine 4xx other than 401/403/404/405/407/408/429 (e.g. prompt
                       // too long): the client's own request refused
  kEngineError,        // other status, error object, invalid stream termination
  kInvalidResponse,    // unreadable descriptor, invalid continuation, unassemblable body
  kDeadline,           // the original request's deadline passed
  kHandoffExpired,     // the KV handoff outlived serving.handoff_timeout_s (B7)
  kCancelled,          // the client went away (B19)
};
std::string_view FailureReasonName(FailureReason r);  // "engine_unreachable", ...
inline constexpr FailureReason kFailureReasons[] = {
    FailureReason::kEngineUnreachable, FailureReason::kEngineConnection,
    FailureReason::kEngineTimeout,     FailureReason::kEngineOverloaded,
    FailureReason::kEngineRejected,    FailureReason::kEngineError,
    FailureReason::kInvalidResponse,   FailureReason::kDeadline,
    FailureReason::kHandoffExpired,    FailureReason::kCancelled};

// What exactly happened within a reason (the sub-reason).
enum class FailureCause {
  kNone,                 // the reason says it all (deadline, cancellation, ...)
  kBadUrl,               // the engine's URL does not parse
  kConnectFailed,        // connect refused or failed
  kConnectTimeout,       // connect did not complete within http.connect_timeout_s
  kConnectionLost,       // an established connection broke before a complete response
  kLegTimeout,           // the prefill leg's own timeout
  kFirstTokenTimeout,    // no first token in time (B12)
  kReadTimeout,          // silence between tokens (B13)
  kEngineStatus,         // the engine answered an HTTP error status (engine_status)
  kEngineRefusedRouter,  // the engine refused the router itself: 401, 403, 404, 405 or
                         // 407 (its API key, its served model name or its paths differ
                         // from the router's config), never the client's mistake
  kStreamError,          // an error object inside a 200 stream (engine_status = its code)
  kNoHandoff,            // the prefill response carried no usable handoff
  kInvalidContinuation,  // the handoff was refused before decode (B3; handoff_rejection)
  kResponseBound,        // a response broke a size or shape bound
  kMalformedStream,      // the SSE stream does not parse
  kEarlyDone,            // [DONE] before any token
  kUnterminated,         // the stream ended without [DONE]
  kUnassemblable,        // a non-streaming response could not be assembled
  kClientTooSlow,        // the client stopped reading until the deadline
  kEngineRemoved,        // the engine left the fleet and the leg outlasted the drain (B23)
};

struct EngineFailure {
  Phase phase = Phase::kPrefill;
  FailureReason reason = FailureReason::kEngineError;
  BreakerClass breaker_class = BreakerClass::kNone;
  // Which engine the breaker evidence counts against: the leg's engine, or
  // for an invalid continuation (B3) the producer that issued the descriptor.
  std::string evidence_iid;
  // The leg's engine (where the failure was observed).
  std::string iid;
  FailureCause cause = FailureCause::kNone;
  // The engine's HTTP status when it answered with one (or the code of an
  // error object in its stream), else 0. Data: the status table decides
  // what a client sees.
  int engine_status = 0;
  // Detail text; begins with the exact strings of SPEC §5 where one applies.
  std::string detail;
  // Transient per B14: a fresh attempt may help.
  bool transient = false;
  // The descriptor rule that refused the handoff before any decode request
  // (engines/descriptor_contract.h; "connector_mismatch", "endpoint_mismatch",
  // "reused_handoff"), else empty.
  std::string handoff_rejection;
};

// Every handoff_rejection a leg can report: the descriptor contract's rules,
// the connector's (connector_mismatch, endpoint_mismatch) and reused_handoff.
std::vector<std::string_view> HandoffRejectionReasons();

// A failure record with the given fields; the breaker evidence counts
// against `iid` unless the class is kNone. `detail` is made well-formed
// UTF-8 (ToValidUtf8) when it is not.
EngineFailure MakeFailure(Phase phase, const std::string& iid, FailureReason reason,
                          BreakerClass cls, FailureCause cause, std::string detail, bool transient);

// Engine text (error messages, bodies) enters failure details and JSON
// documents only as well-formed UTF-8: nlohmann::json refuses to serialise
// anything else, and gRPC string fields must be UTF-8.

// True when `bytes` is well-formed UTF-8 (no overlongs, surrogates or code
// points past U+10FFFF).
bool IsValidUtf8(std::string_view bytes);

// `bytes` as well-formed UTF-8: each ill-formed subsequence (a maximal
// subpart, as Unicode recommends) is replaced by U+FFFD. At most `max_bytes`
// bytes are returned, cut only at a character boundary; `*truncated` (when
// given) tells whether anything was cut. Well-formed input within the bound
// comes back unchanged.
std::string ToValidUtf8(std::string_view bytes, size_t max_bytes = std::string::npos,
                        bool* truncated = nullptr);

// The bound on engine text in a failure: longer text is cut (at a character
// boundary) and ends with "...", the whole within this many bytes.
inline constexpr size_t kMaxEngineTextBytes = 500;

// `bytes` made readable: well-formed UTF-8 (ToValidUtf8) within
// kMaxEngineTextBytes. Idempotent.
std::string EngineText(std::string_view bytes);

// The message inside an engine's error body (vLLM's nested, legacy flat or
// string shapes; else the raw text), as EngineText. Bodies larger than 64 KiB
// are not parsed: their leading text is the message.
std::string EngineErrorMessage(const std::string& body);

// Whether an engine's status says it refuses the router itself rather than
// the client's request: 401, 403, 404, 405 and 407 on an inference leg (the
// door has already checked the client's model, path and key).
bool EngineRefusesRouter(int engine_status);

// Classifies an engine's HTTP error status (or, with `in_stream`, an error
// object inside a 200 stream, B11) into the one failure record. `message` is
// the engine's text; it is used as EngineText(message).
EngineFailure ClassifyEngineStatus(Phase phase, const std::string& iid, int engine_status,
                                   const std::string& message, bool in_stream);

}  // namespace narwhal::engines

#endif  // NARWHAL_ENGINES_ENGINE_FAILURE_H_
