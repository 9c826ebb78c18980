// Fault-injection rules of the simulated engine: parsing, validation and
// matching. Pure logic, no I/O.
//
// A rule document is {"faults": [rule, ...]}; a rule is
// {"kind": K, "phase": "prefill"|"decode"|"any", "times": N, ...params}.
// `phase` defaults to "any", `times` to 1 (-1 = until cleared). A document
// is accepted whole or not at all; errors name the offending field, e.g.
// `faults[1].kind: unknown fault kind "frob"`. Unknown keys are rejected.
//
// Kinds and their parameters (all optional unless marked required):
//   drop_connection                 close the socket, no response
//   delay_headers {ms (required)}   wait before the status line
//   http_status {status (required, 100..599), message, type}
//   silent_before_first_token       headers, then silence
//   metadata_then_silence {chunks = 1}
//   stall_after_tokens {tokens = 1}
//   close_before_done {tokens = 1}  end the body without [DONE]
//   done_before_token               [DONE] before any token
//   error_in_stream {after_tokens = 0, code = 500 (integer or string),
//                    message = "Internal server error", type}
//   no_descriptor                   prefill answer with kv_transfer_params null
//   descriptor_without_engine_id    descriptor lacks remote_engine_id
//   malformed_block_ids {block_ids} descriptor with bad remote_block_ids
//                                   (default [[<first id>, "x"]])
//   slow_tokens {interval_ms (required)}
//   recompute                       a consumer ignores the handoff: no pull,
//                                   the prompt computed locally, usage
//                                   cached_tokens 0, failed-transfer counter
//                                   bumped; the producer's lease runs out
// The three descriptor kinds only ever match prefill-phase requests: phase
// "decode" is rejected for them, and "any" means the prefill phase.
// recompute only ever matches decode requests carrying a complete descriptor
// (remote_engine_id set): phase "prefill" is rejected, "any" means decode.
// Any other rule may carry {"remote_engine_id": ID}: it then matches only
// requests whose kv_transfer_params.remote_engine_id is exactly ID (decodes
// of handoffs from that one producer).
//
// Matching (FaultBook::Take): rules are tried in the order they were added;
// the first rule whose phase matches the request and whose remaining `times`
// is not 0 fires and its `times` is decremented (unless -1). Exhausted rules
// stay listed with times 0 until cleared.
#ifndef NARWHAL_ENGINES_SIM_FAULT_RULES_H_
#define NARWHAL_ENGINES_SIM_FAULT_RULES_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "nlohmann/json.hpp"

namespace narwhal::sim {

enum class FaultKind {
  kDropConnection,
  kDelayHeaders,
  kHttpStatus,
  kSilentBeforeFirstToken,
  kMetadataThenSilence,
  kStallAfterTokens,
  kCloseBeforeDone,
  kDoneBeforeToken,
  kErrorInStream,
  kNoDescriptor,
  kDescriptorWithoutEngineId,
  kMalformedBlockIds,
  kSlowTokens,
  kRecompute,
  kInvalidText,
};

// The phase of a request: kPrefill when its kv_transfer_params has
// do_remote_decode true, else kDecode.
enum class Phase { kPrefill, kDecode };

enum class PhaseFilter { kAny, kPrefill, kDecode };

absl::string_view FaultKindName(FaultKind kind);
std::optional<FaultKind> ParseFaultKind(absl::string_view name);
absl::string_view PhaseName(Phase phase);

// True for the kinds that shape a producer's descriptor.
bool IsDescriptorKind(FaultKind kind);

struct FaultRule {
  FaultKind kind = FaultKind::kDropConnection;
  PhaseFilter phase = PhaseFilter::kAny;
  // Remaining firings; -1 = until cleared.
  int times = 1;
  // How often the rule fired so far.
  int fired = 0;

  // delay_headers: ms; slow_tokens: interval_ms.
  int ms = 0;
  // http_status: status.
  int status = 0;
  // http_status, error_in_stream; empty = the kind's default.
  // invalid_text: the shape in `type` ("raw_byte" or "lone_surrogate").
  std::string message;
  std::string type;
  // metadata_then_silence: chunks; stall_after_tokens, close_before_done:
  // tokens; error_in_stream: after_tokens; invalid_text: at_token.
  int count = 0;
  // error_in_stream: code (an integer or a string).
  nlohmann::json code = 500;
  // malformed_block_ids: the remote_block_ids value to emit, when given.
  std::optional<nlohmann::json> block_ids;
  // When non-empty: only requests whose kv_transfer_params.remote_engine_id
  // equals it match.
  std::string remote_engine_id;

  // True when a request of `phase` (whose descriptor names the producer
  // `request_remote_engine_id`, "" for none) is subject to this rule.
  bool Matches(Phase request_phase, absl::string_view request_remote_engine_id = "") const;

  // The rule as GET /sim/faults lists it: kind, phase, times, fired and the
  // kind's parameters with their effective values.
  nlohmann::json ToJson() const;
};

// Parses a rule document (see the file comment).
absl::StatusOr<std::vector<FaultRule>> ParseFaultDocument(const nlohmann::json& document);
// Same, from the raw request body (invalid JSON is an error).
absl::StatusOr<std::vector<FaultRule>> ParseFaultBody(absl::string_view body);

// The rules of one engine. Thread-safe.
class FaultBook {
 public:
  static constexpr size_t kMaxRules = 1000;

  // Appends `rules` after the existing ones; fails (adding nothing) when
  // the book would hold more than kMaxRules.
  absl::Status Append(std::vector<FaultRule> rules);
  void Clear();
  // The rule that fires for a request of `phase`, if any (see file comment).
  std::optional<FaultRule> Take(Phase phase, absl::string_view remote_engine_id = "");
  // {"faults": [rule.ToJson(), ...]}
  nlohmann::json ToJson() const;

 private:
  mutable absl::Mutex mu_;
  std::vector<FaultRule> rules_ ABSL_GUARDED_BY(mu_);
};

}  // namespace narwhal::sim

#endif  // NARWHAL_ENGINES_SIM_FAULT_RULES_H_
