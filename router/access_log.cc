#include "router/access_log.h"

#include <cmath>
#include <cstdio>
#include <ctime>
#include <optional>

#include "engines/api.h"

namespace narwhal::router {
namespace {

using json = nlohmann::json;

std::string Iso8601(double unix_seconds) {
  const double whole = std::floor(unix_seconds);
  const time_t secs = static_cast<time_t>(whole);
  const int millis = std::min(999, static_cast<int>((unix_seconds - whole) * 1000));
  tm utc{};
  gmtime_r(&secs, &utc);
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", utc.tm_year + 1900,
                utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec, millis);
  return buf;
}

json OrNull(const std::string& s) { return s.empty() ? json(nullptr) : json(s); }
json OrNull(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }

}  // namespace

absl::StatusOr<std::unique_ptr<AccessLog>> AccessLog::Open(const std::string& path,
                                                           AccessLogOptions options) {
  JournalOptions journal;
  journal.name = "access log";
  journal.max_pending_rows = options.max_pending_lines;
  journal.write = std::move(options.write);
  journal.refusal_rows_per_s = 0;  // one line per request, refusals included
  auto writer = Journal::Open(path == "-" ? "/dev/stdout" : path, std::move(journal));
  if (!writer.ok()) return writer.status();
  return std::unique_ptr<AccessLog>(new AccessLog(std::move(*writer)));
}

json AccessLog::Line(const Request& request, const Outcome& outcome, const RequestRecord& record,
                     double duration_s, double finished_wall, const JournalStatus* status) {
  json model = nullptr;
  if (request.body.is_object()) {
    auto it = request.body.find("model");
    if (it != request.body.end() && it->is_string()) model = *it;
  }
  return {
      {"ts", Iso8601(finished_wall)},
      {"rid", request.rid},
      {"client_rid", OrNull(request.client_rid)},
      {"trace_id", OrNull(request.trace.trace_id)},
      {"tenant", OrNull(request.tenant)},
      {"door", DoorName(request.door)},
      {"api", engines::ApiLabel(request.api)},
      {"model", std::move(model)},
      {"stream", request.stream},
      {"status", status != nullptr ? status->Status(outcome) : json(nullptr)},
      {"terminal", TerminalName(outcome.terminal)},
      {"reason", OrNull(std::string(ReasonName(outcome.reason)))},
      {"prefill_iid", OrNull(record.prefill_iid)},
      {"decode_iid", OrNull(record.decode_iid)},
      {"attempts", record.attempts},
      {"ttft_s", OrNull(outcome.ttft_s)},
      {"first_byte_s", OrNull(outcome.first_byte_s)},
      {"duration_s", duration_s},
      {"prompt_tokens", outcome.prompt_tokens >= 0 ? json(outcome.prompt_tokens) : json(nullptr)},
      {"output_tokens", outcome.output_tokens},
  };
}

void AccessLog::Record(const Request& request, const Outcome& outcome, const RequestRecord& record,
                       double duration_s, double finished_wall, const JournalStatus* status) {
  writer_->Write(Line(request, outcome, record, duration_s, finished_wall, status));
}

}  // namespace narwhal::router
