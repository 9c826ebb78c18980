#include "engines/sim/recording.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "engines/json_limits.h"

namespace narwhal::sim {

using engines::ParseJson;
namespace {

// Larger bodies are not kept (the ring holds 2000 records).
constexpr size_t kMaxRecordedBody = 256 << 10;

}  // namespace

uint64_t BeginRecord(EngineState& state, const httplib::Request& req) {
  RequestRecord record;
  record.at = NowSeconds();
  record.method = req.method;
  record.path = req.path;
  record.peer_port = req.remote_port;
  for (const auto& [name, value] : req.headers) {
    const std::string key = absl::AsciiStrToLower(name);
    // httplib adds these itself; they say nothing about the client.
    if (key == "remote_addr" || key == "remote_port" || key == "local_addr" ||
        key == "local_port") {
      continue;
    }
    if (key == "authorization") {
      const size_t space = value.find(' ');
      record.headers[key] =
          absl::StrCat(space == std::string::npos ? "" : value.substr(0, space + 1), "***");
    } else {
      record.headers[key] = value;
    }
  }
  record.body_bytes = req.body.size();
  if (req.body.size() > kMaxRecordedBody) {
    record.body_truncated = true;
  } else if (!req.body.empty()) {
    record.body = ParseJson(req.body);
    if (record.body.is_discarded()) record.body = req.body;
  }
  return state.requests.Add(std::move(record));
}

void FinishRecord(EngineState& state, uint64_t seq, int status, RequestEnd end) {
  state.requests.Update(seq, [status](RequestRecord& r) { r.status = status; });
  state.requests.End(seq, end, NowSeconds());
}

}  // namespace narwhal::sim
