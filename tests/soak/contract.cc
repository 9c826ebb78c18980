#include "tests/soak/contract.h"

#include <set>
#include <unordered_map>

#include "absl/strings/str_cat.h"

namespace narwhal::soak {
namespace {

using json = nlohmann::json;

const std::set<int> kAllowedStatus = {200, 400, 429, 500, 502, 503, 504};
// A committed stream can only fail with what an engine stream or the router
// ends it with: injected in-stream codes (500, 502, 503; a string code is
// 500), a cut or bad stream (502), a timeout or the deadline (504).
const std::set<int> kAllowedAfterCommit = {500, 502, 503, 504};
const std::set<std::string> kErrorTypes = {
    "invalid_request_error", "rate_limit_error", "backend_unavailable", "prefill", "decode",
    "request_expired",       "handoff_expired"};

// server/status_table.cc, GrpcCodeForStatus.
int GrpcCodeFor(int status) {
  switch (status) {
    case 200:
      return 0;
    case 400:
      return 3;
    case 429:
      return 8;
    case 500:
      return 13;
    case 502:
    case 503:
      return 14;
    case 504:
      return 4;
    default:
      return -1;
  }
}

bool TerminalFits(int status, const std::string& terminal) {
  switch (status) {
    case 200:
      return terminal == "completed";
    case 400:
      return terminal == "invalid" || terminal == "failed";
    case 429:
      return terminal == "rejected" || terminal == "failed";
    case 504:
      return terminal == "expired" || terminal == "failed";
    default:
      return terminal == "failed";
  }
}

// A gRPC call cancelled by its client before its request message arrived
// has a row without client_rid (there was no message to read it from), so
// it cannot be matched to the soak's request; such rows are counted apart.
// The router journals it cancelled (server/grpc/inference_service.cc Admit());
// a cancel that lands after the router found the message missing but
// before gRPC reports the call cancelled still reads as a missing message.
bool PrematureCancelRow(const json& row) {
  if (row.value("door", "") != "grpc") return false;
  // The router's row for it: cancelled, with no client_rid (there was no
  // message to read it from).
  if (row.value("terminal", "") == "cancelled" && row.value("reason", json()) == "cancelled") {
    return true;
  }
  // A cancel that lands between the message check and IsCancelled().
  return row.value("reason", json()) == "malformed_message" &&
         row.value("error", json()) == "the call carried no request message";
}

const char* DoorName(Door door) { return door == Door::kHttp ? "http" : "grpc"; }

// The journal reason of a refusal the client saw as `status`, whose row may
// have been counted into a summary instead ("" when none may be).
std::string SuppressibleReason(int status) { return status == 429 ? "inflight_limit" : ""; }

// The status the client finally saw: the HTTP status, a committed stream's
// terminal event code, or the gRPC ErrorInfo's status (200 for OK).
int FinalStatus(const RequestRecord& r) {
  if (r.plan.door == Door::kGrpc) return r.grpc_code == 0 ? 200 : r.error_code;
  if (r.http_status == 200 && r.terminal_event) return r.error_code;
  return r.http_status;
}

std::string Label(const RequestRecord& r) {
  const std::string door = DoorName(r.plan.door);
  if (r.aborted) return door + " aborted by client";
  if (!r.transport_error.empty()) return door + " transport error";
  const int status = FinalStatus(r);
  if (r.plan.door == Door::kHttp && r.terminal_event) {
    return absl::StrCat(door, " 200 then ", status, " event");
  }
  if (r.plan.door == Door::kGrpc && r.output_started) {
    return absl::StrCat(door, " ", status, " after output");
  }
  return absl::StrCat(door, " ", status);
}

std::string Describe(const RequestRecord& r, const json* row) {
  std::string text = absl::StrCat(
      "[", r.plan.client_rid, " ", DoorName(r.plan.door), r.plan.chat ? " chat" : " completions",
      r.plan.stream ? " stream" : "", " rid=", r.rid, " http=", r.http_status,
      " grpc=", r.grpc_code, " error=", r.error_code, " ", r.error_type, " \"",
      r.error_message.substr(0, 160), "\" tokens=", r.tokens,
      " elapsed=", absl::FormatDuration(r.elapsed), "]");
  if (row != nullptr) absl::StrAppend(&text, " journal: ", row->dump().substr(0, 600));
  return text;
}

}  // namespace

std::map<std::string, long long> SuppressedRefusals(const std::vector<json>& event_rows) {
  std::map<std::string, long long> out;
  for (const json& row : event_rows) {
    if (!row.is_object() || row.value("event", "") != "refusals_suppressed") continue;
    const json count = row.value("count", json());
    if (count.is_number_integer()) out[row.value("reason", "")] += count.get<long long>();
  }
  return out;
}

ContractReport CheckContract(const std::vector<RequestRecord>& records,
                             const std::vector<json>& terminal_rows,
                             std::map<std::string, long long> suppressed) {
  ContractReport report;
  report.requests = static_cast<int>(records.size());
  report.journal_rows = static_cast<int>(terminal_rows.size());
  std::unordered_map<std::string, std::vector<const json*>> by_client_rid;
  std::set<std::string> sent;
  for (const RequestRecord& r : records) sent.insert(r.plan.client_rid);
  std::vector<const json*> premature;
  for (const json& row : terminal_rows) {
    const json client_rid = row.value("client_rid", json());
    if (client_rid.is_null() && PrematureCancelRow(row)) {
      premature.push_back(&row);
      continue;
    }
    if (!client_rid.is_string() || sent.count(client_rid.get<std::string>()) == 0) {
      report.violations.push_back(
          absl::StrCat("journal row of no request the soak sent: ", row.dump().substr(0, 600)));
      continue;
    }
    by_client_rid[client_rid.get<std::string>()].push_back(&row);
  }

  std::set<std::string> premature_rids;
  for (const json* row : premature) premature_rids.insert(row->value("rid", ""));

  for (const RequestRecord& r : records) {
    ++report.outcomes[Label(r)];
    auto add = [&](const std::string& what, const json* row) {
      report.violations.push_back(absl::StrCat(what, " ", Describe(r, row)));
    };
    const std::vector<const json*>& rows = by_client_rid[r.plan.client_rid];
    // Early abort, nothing seen from the router: maybe it never saw the
    // request; or a gRPC call whose premature-cancel row has the rid the
    // client saw.
    const absl::Duration early = r.plan.door == Door::kGrpc ? kGrpcEarlyAbort : kEarlyAbort;
    const bool unseen = r.aborted && rows.empty() && r.plan.abort_after <= early &&
                        r.http_status == 0 && (r.rid.empty() || premature_rids.count(r.rid) == 1);
    if (unseen) {
      ++report.aborted;
      ++report.aborted_unseen;
      if (r.plan.door == Door::kGrpc) ++report.premature_cancel_rows;  // may pair with a row
      continue;
    }
    if (r.invalid_utf8) add("generated text that is not valid UTF-8 reached the client", nullptr);
    if (r.repaired_text) ++report.repaired_text;
    // A refusal whose row a summary counted instead.
    if (rows.empty()) {
      const int seen = r.aborted ? r.http_status : FinalStatus(r);
      const std::string reason = SuppressibleReason(seen);
      if (!reason.empty() && suppressed[reason] > 0) {
        --suppressed[reason];
        ++report.suppressed_rows;
        if (r.aborted) ++report.aborted;
        continue;
      }
    }
    if (rows.size() != 1) {
      add(absl::StrCat(rows.size(), " journal rows (expected 1)"),
          rows.empty() ? nullptr : rows.front());
    }
    const json* row = rows.size() == 1 ? rows.front() : nullptr;
    const std::string terminal = row != nullptr ? row->value("terminal", "") : "";
    if (row != nullptr) {
      ++report.matched;
      ++report.terminals[terminal];
      if (!r.rid.empty() && row->value("rid", "") != r.rid) add("journal rid differs", row);
      if (row->value("door", "") != DoorName(r.plan.door)) add("journal door differs", row);
      if (row->value("stream", json()) != json(r.plan.stream)) add("journal stream differs", row);
    }
    for (const std::string& p : r.problems) add(p, row);
    if (r.aborted) {
      ++report.aborted;
      if (terminal == "cancelled") {
        ++report.aborted_cancelled;
        const json status = row->value("status", json());
        if (!status.is_null() && status != json(200)) add("cancelled row with a status", row);
      }
      continue;
    }
    if (!r.transport_error.empty()) {
      add(absl::StrCat("client saw no proper end (", r.transport_error, ")"), row);
      continue;
    }
    const int status = FinalStatus(r);
    if (kAllowedStatus.count(status) == 0)
      add(absl::StrCat("status ", status, " not allowed"), row);
    if (r.terminal_event && kAllowedAfterCommit.count(status) == 0) {
      add(absl::StrCat("committed stream ended with code ", status), row);
    }
    if (status != 200 && kErrorTypes.count(r.error_type) == 0) {
      add(absl::StrCat("error type \"", r.error_type, "\" not allowed"), row);
    }
    if (r.plan.door == Door::kGrpc && GrpcCodeFor(status) != r.grpc_code) {
      add(absl::StrCat("gRPC code ", r.grpc_code, " does not map status ", status), row);
    }
    if (row == nullptr) continue;
    if (row->value("status", json()) != json(status)) add("journal status differs", row);
    if (!TerminalFits(status, terminal)) add("journal terminal does not fit the status", row);
    const json tokens = row->value("output_tokens", json());
    if (status == 200 && r.saw_done && tokens.is_number_integer() &&
        tokens.get<int>() != r.tokens) {
      add(absl::StrCat("client got ", r.tokens, " tokens, journal says ", tokens.dump()), row);
    }
  }
  // Each premature-cancel row belongs to an early-aborted gRPC request
  // without a row of its own.
  const int grpc_unseen = report.premature_cancel_rows;
  report.premature_cancel_rows = static_cast<int>(premature.size());
  if (report.premature_cancel_rows > grpc_unseen) {
    for (const json* row : premature) {
      report.violations.push_back(
          absl::StrCat("journal row of no request the soak sent: ", row->dump().substr(0, 600)));
    }
  } else if (!premature.empty()) {
    report.notes.push_back(
        absl::StrCat(report.premature_cancel_rows,
                     " gRPC call(s) cancelled before their request message arrived were journaled "
                     "invalid/400 \"the call carried no request message\" instead of cancelled "
                     "(known router issue, tolerated), e.g. ",
                     premature.front()->dump().substr(0, 400)));
  }
  for (const auto& [reason, left] : suppressed) {
    // A request that went away before it saw its refusal is not matched.
    if (left > 0) {
      report.notes.push_back(absl::StrCat(left, " suppressed ", reason,
                                          " refusal row(s) matched no request without a row "
                                          "(their clients went away early)"));
    }
    if (left > report.aborted_unseen) {
      report.violations.push_back(absl::StrCat("refusals_suppressed rows count ", left, " more ",
                                               reason, " refusals than requests without a row (",
                                               report.aborted_unseen, " unseen)"));
    }
  }
  const int judged = report.aborted - report.aborted_unseen;
  if (judged > 0 && report.aborted_cancelled < kMinCancelledShare * judged) {
    report.violations.push_back(absl::StrCat("only ", report.aborted_cancelled, " of ", judged,
                                             " aborted requests were journaled cancelled"));
  }
  return report;
}

}  // namespace narwhal::soak
