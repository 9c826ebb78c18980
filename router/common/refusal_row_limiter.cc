#include "router/common/refusal_row_limiter.h"

#include <algorithm>
#include <chrono>

namespace narwhal::router {
namespace {

constexpr auto kSummaryEvery = std::chrono::seconds(1);

}  // namespace

bool RefusalRowLimiter::IsRefusalRow(const nlohmann::json& row) {
  if (!row.is_object() || !row.contains("rid")) return false;
  const auto terminal = row.find("terminal");
  if (terminal == row.end() || !terminal->is_string()) return false;
  if (*terminal != "rejected" && *terminal != "invalid") return false;
  const auto attempts = row.find("attempts");
  return attempts == row.end() || (attempts->is_number_integer() && attempts->get<long long>() == 0);
}

bool RefusalRowLimiter::Admit(const nlohmann::json& row, MonoTime now, double wall_now) {
  if (rows_per_s_ <= 0 || !IsRefusalRow(row)) return true;
  const auto reason = row.find("reason");
  const std::string key = reason != row.end() && reason->is_string()
                              ? reason->get<std::string>()
                              : std::string("none");
  Bucket& b = buckets_[key];
  if (!b.started) {
    b.started = true;
    b.tokens = rows_per_s_;
    b.refilled = now;
  } else if (now > b.refilled) {
    const double elapsed = std::chrono::duration<double>(now - b.refilled).count();
    b.tokens = std::min(rows_per_s_, b.tokens + elapsed * rows_per_s_);
    b.refilled = now;
  }
  if (b.tokens >= 1) {
    b.tokens -= 1;
    return true;
  }
  if (b.suppressed++ == 0) {
    b.first_suppressed = now;
    b.first_suppressed_wall = wall_now;
  }
  ++pending_;
  return false;
}

std::vector<nlohmann::json> RefusalRowLimiter::TakeSummaries(MonoTime now, double wall_now,
                                                             bool all) {
  std::vector<nlohmann::json> out;
  if (pending_ == 0) return out;
  for (auto& [reason, b] : buckets_) {
    if (b.suppressed == 0 || (!all && now < b.first_suppressed + kSummaryEvery)) continue;
    out.push_back({{"event", "refusals_suppressed"},
                   {"reason", reason},
                   {"count", b.suppressed},
                   {"first_at", b.first_suppressed_wall},
                   {"at", wall_now}});
    pending_ -= b.suppressed;
    b.suppressed = 0;
  }
  return out;
}

}  // namespace narwhal::router
