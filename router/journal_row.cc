#include "router/journal_row.h"

namespace narwhal::router {
namespace {

using json = nlohmann::json;

json OptionalSeconds(const std::optional<double>& s) { return s ? json(*s) : json(nullptr); }

json NullIfEmpty(const std::string& s) { return s.empty() ? json(nullptr) : json(s); }

json AttemptFailures(const std::vector<AttemptFailure>& failures, const JournalStatus* status) {
  json out = json::array();
  for (const AttemptFailure& af : failures) {
    json row = {
        {"attempt", af.attempt},
        {"phase", engines::PhaseName(af.failure.phase)},
        {"iid", NullIfEmpty(af.failure.iid)},
        {"reason", engines::FailureReasonName(af.failure.reason)},
        {"class", engines::BreakerClassName(af.failure.breaker_class)},
        {"status", status != nullptr ? json(status->AttemptStatus(af.failure)) : json(nullptr)},
        {"error", af.failure.detail},
        {"transient", af.failure.transient},
        {"output_started", af.output_started},
        {"retry_scheduled", af.retry_scheduled},
        {"retry_reason", af.retry_reason}};
    if (!af.failure.handoff_rejection.empty()) {
      row["handoff_rejection"] = af.failure.handoff_rejection;
    }
    out.push_back(std::move(row));
  }
  return out;
}

}  // namespace

json JournalRow(const Request& request, const Outcome& outcome, const RequestRecord& record,
                double duration_s, const JournalStatus* status) {
  const std::string_view reason = ReasonName(outcome.reason);
  json row = {
      {"rid", request.rid},
      {"client_rid", NullIfEmpty(request.client_rid)},
      {"trace_id", NullIfEmpty(request.trace.trace_id)},
      {"tenant", NullIfEmpty(request.tenant)},
      {"api", engines::ApiLabel(request.api)},
      {"door", DoorName(request.door)},
      {"stream", request.stream},
      {"arrived", request.arrived_wall},
      {"terminal", TerminalName(outcome.terminal)},
      {"reason", reason.empty() ? json(nullptr) : json(reason)},
      {"status", status != nullptr ? status->Status(outcome) : json(nullptr)},
      {"error_type", status != nullptr ? status->ErrorTypeOf(outcome) : json(nullptr)},
      {"error", NullIfEmpty(outcome.message)},
      {"ttft_s", OptionalSeconds(outcome.ttft_s)},
      {"first_byte_s", OptionalSeconds(outcome.first_byte_s)},
      {"tpot_s", OptionalSeconds(record.tpot_s)},
      {"duration_s", duration_s},
      {"prefill_iid", NullIfEmpty(record.prefill_iid)},
      {"decode_iid", NullIfEmpty(record.decode_iid)},
      {"crossed", !record.decode_iid.empty() && record.decode_iid != record.prefill_iid},
      {"attempts", record.attempts},
      {"fleet_generation",
       request.config != nullptr ? json(request.config->number) : json(nullptr)},
      {"attempt_failures", AttemptFailures(record.failures, status)},
      {"output_started", outcome.output_started},
      {"output_tokens", outcome.output_tokens},
      {"handoff_abandoned", nullptr},
      {"handoff_released", nullptr},
      {"kv_recompute_suspected", false},
  };
  if (record.recompute_evidence) {
    row["kv_recompute_suspected"] = true;
    row["kv_recompute_evidence"] = *record.recompute_evidence;
  }
  if (record.abandoned) {
    row["handoff_abandoned"] = AbandonReasonName(*record.abandoned);
    row["handoff_released"] = record.released;
  }
  if (record.placed) {
    row["prefill_placement"] = PlacementReasonName(record.prefill_placement.reason);
    row["prefix_match_bytes"] = record.prefill_placement.match_bytes;
    row["decode_placement"] = record.decode_placement
                                  ? json(PlacementReasonName(*record.decode_placement))
                                  : json(nullptr);
    row["disaggregated"] = record.disaggregated;
    row["cached_tokens_est"] =
        record.cached_tokens_est ? json(*record.cached_tokens_est) : json(nullptr);
    if (!record.placement_fallback.empty()) row["placement_fallback"] = record.placement_fallback;
  }
  if (!record.continuations.empty()) {
    json continuations = json::array();
    for (const ContinuationRecord& c : record.continuations) {
      continuations.push_back(
          {{"at_token", c.at_token},
           {"from_iid", NullIfEmpty(c.from_iid)},
           {"to_iid", NullIfEmpty(c.to_iid)},
           {"reason", c.reason},
           {"outcome", ContinuationOutcomeName(c.outcome.value_or(ContinuationOutcome::kFailed))}});
    }
    row["continuations"] = std::move(continuations);
  }
  return row;
}

}  // namespace narwhal::router
