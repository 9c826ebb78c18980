#include "router/fleet/placement_view.h"

#include <algorithm>

namespace narwhal::router {
namespace {

bool RolePermits(const EngineRecord& e, Phase phase) {
  return phase == Phase::kPrefill ? CanPrefill(e.settings().role) : CanDecode(e.settings().role);
}

bool Excluded(const std::vector<std::string>& excluded, const std::string& iid) {
  return std::find(excluded.begin(), excluded.end(), iid) != excluded.end();
}

}  // namespace

bool PlacementView::Serves(const ViewEngine& e, Phase phase, MonoTime now) {
  return RolePermits(*e.engine, phase) && now >= e.serving_from;
}

bool PlacementView::Eligible(const ViewEngine& e, Phase phase, MonoTime now) const {
  return wave_hold.empty() && Serves(e, phase, now);
}

bool PlacementView::LinkHeld(std::string_view producer, std::string_view consumer) const {
  return std::binary_search(held_links.begin(), held_links.end(),
                            std::make_pair(std::string(producer), std::string(consumer)));
}

bool PlacementView::CanPlace(Phase phase, const std::vector<std::string>& excluded,
                             MonoTime now) const {
  for (const ViewEngine& e : engines) {
    if (Eligible(e, phase, now) && !Excluded(excluded, e.engine->iid())) return true;
  }
  return false;
}

bool PlacementView::Ready(MonoTime now, std::string* why) const {
  if (!wave_hold.empty()) {
    if (why != nullptr) *why = wave_hold;
    return false;
  }
  bool prefill = false, decode = false, prefill_checked = false, decode_checked = false;
  for (const ViewEngine& e : engines) {
    const bool p = Eligible(e, Phase::kPrefill, now);
    const bool d = Eligible(e, Phase::kDecode, now);
    prefill = prefill || p;
    decode = decode || d;
    prefill_checked = prefill_checked || (p && e.checked);
    decode_checked = decode_checked || (d && e.checked);
  }
  if (prefill_checked && decode_checked) return true;
  if (why == nullptr) return false;
  if (prefill && decode) {
    *why = std::string("no engine of the ") +
           (!prefill_checked && !decode_checked ? "prefill and decode roles"
            : !prefill_checked                  ? "prefill role"
                                                : "decode role") +
           " has passed a health check yet";
  } else {
    *why = std::string("no engine in placement for the ") +
           (!prefill && !decode ? "prefill and decode roles"
            : !prefill         ? "prefill role"
                               : "decode role");
  }
  return false;
}

const ViewEngine* PlacementView::Find(std::string_view iid) const {
  for (const ViewEngine& e : engines) {
    if (e.engine->iid() == iid) return &e;
  }
  return nullptr;
}

std::vector<engines::EngineTarget> PlacementView::LiveProducers(std::string_view except,
                                                                MonoTime now) const {
  std::vector<const EngineRecord*> live;
  for (const ViewEngine& e : engines) {
    if (e.engine->iid() != except && Serves(e, Phase::kPrefill, now)) live.push_back(e.engine.get());
  }
  std::sort(live.begin(), live.end(), [](const EngineRecord* a, const EngineRecord* b) {
    const int la = a->inflight(Phase::kPrefill);
    const int lb = b->inflight(Phase::kPrefill);
    return la != lb ? la < lb : a->iid() < b->iid();
  });
  std::vector<engines::EngineTarget> out;
  out.reserve(live.size());
  for (const EngineRecord* e : live) out.push_back(e->target());
  return out;
}

std::optional<engines::EngineTarget> PlacementView::LiveConsumer(std::string_view except,
                                                                 MonoTime now) const {
  const EngineRecord* best = nullptr;
  for (const ViewEngine& e : engines) {
    if (e.engine->iid() == except || !Serves(e, Phase::kDecode, now)) continue;
    if (best == nullptr || e.engine->inflight(Phase::kDecode) < best->inflight(Phase::kDecode)) {
      best = e.engine.get();
    }
  }
  if (best == nullptr) return std::nullopt;
  return best->target();
}

}  // namespace narwhal::router
