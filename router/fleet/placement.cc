#include "router/fleet/placement.h"

#include <algorithm>

namespace narwhal::router {

std::optional<size_t> ChooseLeastLoaded(const std::vector<Candidate>& candidates, size_t rotation) {
  const size_t n = candidates.size();
  if (n == 0) return std::nullopt;
  std::optional<size_t> best;
  for (size_t k = 0; k < n; ++k) {
    const size_t pos = (rotation + k) % n;
    const Candidate& c = candidates[pos];
    if (!best) {
      best = pos;
      continue;
    }
    const Candidate& b = candidates[*best];
    if (c.avoid != b.avoid) {
      if (!c.avoid) best = pos;
      continue;
    }
    if (c.inflight < b.inflight) best = pos;
  }
  return best;
}

bool Imbalanced(int matched_inflight, int least_inflight, const ImbalanceLimit& limit) {
  return matched_inflight - least_inflight > limit.absolute &&
         matched_inflight > limit.relative * least_inflight;
}

std::optional<Choice> ChooseCacheAware(const std::vector<Candidate>& candidates, size_t rotation,
                                       const ImbalanceLimit& limit) {
  const size_t n = candidates.size();
  if (n == 0) return std::nullopt;
  std::optional<size_t> matched;  // longest match, then fewest in flight
  std::optional<size_t> least;    // fewest in flight, then smallest index
  const bool any_preferred = std::any_of(candidates.begin(), candidates.end(),
                                         [](const Candidate& c) { return !c.avoid; });
  for (size_t k = 0; k < n; ++k) {
    const size_t pos = (rotation + k) % n;
    const Candidate& c = candidates[pos];
    if (any_preferred && c.avoid) continue;
    if (c.match > 0) {
      const Candidate* m = matched ? &candidates[*matched] : nullptr;
      if (m == nullptr || c.match > m->match || (c.match == m->match && c.inflight < m->inflight)) {
        matched = pos;
      }
    }
    const Candidate* l = least ? &candidates[*least] : nullptr;
    if (l == nullptr || c.inflight < l->inflight ||
        (c.inflight == l->inflight && c.indexed < l->indexed)) {
      least = pos;
    }
  }
  if (!matched) return Choice{*least, PlacementReason::kLeastLoaded};
  if (Imbalanced(candidates[*matched].inflight, candidates[*least].inflight, limit)) {
    return Choice{*least, PlacementReason::kImbalance};
  }
  return Choice{*matched, PlacementReason::kPrefixMatch};
}

}  // namespace narwhal::router
