#include "engines/sim/request_log.h"

#include <utility>

namespace narwhal::sim {
namespace {

nlohmann::json OrNull(const std::string& s) {
  return s.empty() ? nlohmann::json(nullptr) : nlohmann::json(s);
}

}  // namespace

absl::string_view RequestEndName(RequestEnd end) {
  switch (end) {
    case RequestEnd::kOpen:
      return "";
    case RequestEnd::kComplete:
      return "complete";
    case RequestEnd::kFault:
      return "fault";
    case RequestEnd::kClientGone:
      return "client_gone";
    case RequestEnd::kError:
      return "error";
    case RequestEnd::kStopped:
      return "stopped";
  }
  return "";
}

nlohmann::json RequestRecord::ToJson() const {
  return {{"seq", seq},
          {"at", at},
          {"method", method},
          {"path", path},
          {"phase", OrNull(phase)},
          {"headers", headers},
          {"body", body},
          {"body_bytes", body_bytes},
          {"body_truncated", body_truncated},
          {"status", status == 0 ? nlohmann::json(nullptr) : nlohmann::json(status)},
          {"fault", OrNull(fault)},
          {"ended_at", ended_at == 0 ? nlohmann::json(nullptr) : nlohmann::json(ended_at)},
          {"end", OrNull(std::string(RequestEndName(end)))},
          {"tokens_sent", tokens_sent},
          {"peer_port", peer_port}};
}

RequestLog::RequestLog(size_t capacity) : capacity_(capacity == 0 ? 1 : capacity) {}

uint64_t RequestLog::Add(RequestRecord record) {
  absl::MutexLock lock(&mu_);
  record.seq = next_seq_++;
  const uint64_t seq = record.seq;
  records_.push_back(std::move(record));
  while (records_.size() > capacity_) records_.pop_front();
  return seq;
}

void RequestLog::Update(uint64_t seq, absl::FunctionRef<void(RequestRecord&)> update) {
  absl::MutexLock lock(&mu_);
  if (RequestRecord* record = FindLocked(seq)) update(*record);
}

void RequestLog::End(uint64_t seq, RequestEnd end, double at) {
  absl::MutexLock lock(&mu_);
  RequestRecord* record = FindLocked(seq);
  if (record == nullptr || record->end != RequestEnd::kOpen) return;
  record->end = end;
  record->ended_at = at;
}

void RequestLog::Clear() {
  absl::MutexLock lock(&mu_);
  records_.clear();
}

nlohmann::json RequestLog::ToJson() const {
  absl::MutexLock lock(&mu_);
  nlohmann::json list = nlohmann::json::array();
  for (const RequestRecord& record : records_) list.push_back(record.ToJson());
  return {{"requests", std::move(list)}};
}

RequestRecord* RequestLog::FindLocked(uint64_t seq) {
  // Seqs are consecutive within the ring (Clear empties it entirely).
  if (records_.empty()) return nullptr;
  const uint64_t first = records_.front().seq;
  if (seq < first || seq - first >= records_.size()) return nullptr;
  RequestRecord& record = records_[seq - first];
  return record.seq == seq ? &record : nullptr;
}

}  // namespace narwhal::sim
