#include "router/fleet/kv_recompute.h"

#include <algorithm>
#include <charconv>
#include <cmath>

namespace narwhal::router {

bool RecomputeSuspected(long long prompt_tokens, long long cached_tokens) {
  if (prompt_tokens < 2 || cached_tokens < 0) return false;
  return cached_tokens < std::max(1LL, prompt_tokens - 1 - kKvBlockTokens);
}

std::optional<double> FailedTransfers(std::string_view text) {
  std::optional<double> sum;
  while (!text.empty()) {
    const size_t eol = text.find('\n');
    std::string_view line = text.substr(0, eol);
    text = eol == std::string_view::npos ? std::string_view() : text.substr(eol + 1);
    if (line.empty() || line.front() == '#') continue;
    const size_t name_end = line.find_first_of("{ ");
    if (name_end == std::string_view::npos) continue;
    const std::string_view name = line.substr(0, name_end);
    if (name != kFailedTransfersMetric && name != kFailedTransfersMetricBare) continue;
    std::string_view rest = line.substr(name_end);
    if (rest.front() == '{') {
      const size_t close = rest.rfind('}');
      if (close == std::string_view::npos) continue;
      rest = rest.substr(close + 1);
    }
    const size_t start = rest.find_first_not_of(' ');
    if (start == std::string_view::npos) continue;
    rest = rest.substr(start);
    rest = rest.substr(0, rest.find(' '));  // an optional timestamp follows
    double value = 0;
    const auto [ptr, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), value);
    if (ec != std::errc() || ptr != rest.data() + rest.size() || !std::isfinite(value) ||
        value < 0) {
      continue;
    }
    sum = sum.value_or(0) + value;
  }
  return sum;
}

void RecomputeLedger::DecodeStarted(const std::string& consumer, const std::string& producer) {
  Consumer& c = consumers_[consumer];
  c.inflight.insert(producer);
  c.seen.insert(producer);
}

void RecomputeLedger::DecodeEnded(const std::string& consumer, const std::string& producer,
                                  bool explained, MonoTime now) {
  Consumer& c = consumers_[consumer];
  if (auto it = c.inflight.find(producer); it != c.inflight.end()) c.inflight.erase(it);
  if (!explained) return;
  if (!c.pending.empty()) {
    c.pending.pop_front();
  } else if (c.credits.size() < kMaxPending) {
    c.credits.push_back(now);
  }
}

RecomputeSettlement RecomputeLedger::Scrape(const std::string& consumer,
                                            std::optional<double> value, MonoTime now) {
  RecomputeSettlement out;
  Consumer& c = consumers_[consumer];
  const MonoTime oldest = now - engines::FromSeconds(kCreditTtlS);
  while (!c.credits.empty() && c.credits.front() < oldest) c.credits.pop_front();
  if (value.has_value()) {
    if (!c.last.has_value() || *value < *c.last) {
      c.last = value;  // baseline (first scrape, or the engine restarted)
    } else {
      long long delta = static_cast<long long>(std::llround(*value - *c.last));
      c.last = value;
      while (delta > 0 && !c.credits.empty()) {
        c.credits.pop_front();
        --delta;
      }
      std::set<std::string> candidates = c.seen;
      candidates.insert(c.inflight.begin(), c.inflight.end());
      const std::string producer = candidates.size() == 1 ? *candidates.begin() : std::string();
      for (; delta > 0; --delta) {
        if (c.pending.size() >= kMaxPending) {
          out.producers.push_back("");  // no room to wait: settled at once
          continue;
        }
        c.pending.push_back(producer);
      }
    }
  }
  while (c.pending.size() > c.inflight.size()) {
    out.producers.push_back(c.pending.front());
    c.pending.pop_front();
  }
  out.count = static_cast<long long>(out.producers.size());
  if (value.has_value()) c.seen.clear();
  return out;
}

}  // namespace narwhal::router
