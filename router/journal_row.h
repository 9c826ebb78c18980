// The journal row of one finished client request (SPEC §9), built once from
// one request record.
//
// The row's `status`, `error_type` and attempt_failures[].status are how the
// client saw the outcome; they come from the server's status table through
// JournalStatus (router/outcome.h), which the server injects into the router
// at construction (router/ holds no status numbers).
#ifndef NARWHAL_ROUTER_JOURNAL_ROW_H_
#define NARWHAL_ROUTER_JOURNAL_ROW_H_

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engines/engine_failure.h"
#include "router/common/handoff_labels.h"
#include "router/continuation.h"
#include "router/fleet/fleet.h"
#include "router/fleet/placement.h"
#include "router/outcome.h"
#include "router/request.h"
#include "router/request_spans.h"

namespace narwhal::router {

// One failed attempt leg, as the journal's attempt_failures[] records it.
struct AttemptFailure {
  int attempt = 0;
  engines::EngineFailure failure;
  bool output_started = false;
  bool retry_scheduled = false;
  std::string retry_reason;  // allowed, connect_failover, output_started, attempt_limit,
                             // non_transient, original_deadline, shared_budget, no_engine,
                             // cancelled, continuation (B29)
};

// One continuation (B29) or refusal to continue (B30), as the journal's
// continuations[] records it.
struct ContinuationRecord {
  long long at_token = 0;  // tokens of the answer sent before it
  std::string from_iid;    // the engine whose leg failed
  std::string to_iid;      // the continuation's decode engine ("" when none)
  // The failure it follows (a FailureReason name), or why it was refused.
  std::string reason;
  std::optional<ContinuationOutcome> outcome;  // unset while it runs
};

// What the router learned about a request while it ran (empty for a
// request refused before the core).
struct RequestRecord {
  int attempts = 0;
  std::vector<AttemptFailure> failures;
  std::string prefill_iid;  // of the last attempt
  std::string decode_iid;
  std::optional<double> tpot_s;
  // The latest attempt's abandoned handoff, if any, and whether its release
  // started.
  std::optional<AbandonReason> abandoned;
  bool released = false;
  // Placement of the last attempt, when it placed a prefill.
  bool placed = false;
  PlacementInfo prefill_placement;
  std::optional<PlacementReason> decode_placement;
  // B28: whether the last attempt ran a prefill leg on a producer (false: a
  // local prefill on its decode engine), and the prompt tokens the engine
  // that computed the prefill was estimated to hold (when the prompt had
  // token ids).
  bool disaggregated = true;
  std::optional<size_t> cached_tokens_est;
  // B27: why the prompt had no token ids ("" when it had them or needed none).
  std::string placement_fallback;
  // The latest attempt's silent-recompute evidence (router/fleet/kv_recompute.h;
  // journal kv_recompute_suspected, kv_recompute_evidence).
  std::optional<nlohmann::json> recompute_evidence;
  // B29/B30, in order.
  std::vector<ContinuationRecord> continuations;
  // The phases' spans, when the request's spans are exported
  // (router/request_spans.h).
  std::vector<PhaseSpan> spans;
};

// The row; `status` (may be null: the edge fields are then null).
nlohmann::json JournalRow(const Request& request, const Outcome& outcome,
                          const RequestRecord& record, double duration_s,
                          const JournalStatus* status);

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_JOURNAL_ROW_H_
