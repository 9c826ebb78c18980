#include "router/fleet.h"

#include <algorithm>

#include "router/placement.h"

namespace narwhal::router {
namespace {

int PhaseIndex(Phase p) { return p == Phase::kPrefill ? 0 : 1; }

}  // namespace

Fleet::Reservation& Fleet::Reservation::operator=(Reservation&& other) noexcept {
  if (this != &other) {
    Release();
    fleet_ = other.fleet_;
    index_ = other.index_;
    phase_ = other.phase_;
    target_ = std::move(other.target_);
    other.fleet_ = nullptr;
  }
  return *this;
}

void Fleet::Reservation::Release() {
  if (fleet_ == nullptr) return;
  fleet_->ReleaseSlot(index_, phase_);
  fleet_ = nullptr;
}

Fleet::Fleet(const Settings& settings, const Clock& clock, Metrics* metrics)
    : settings_(settings),
      clock_(clock),
      metrics_(metrics),
      book_(settings.engines, settings.recovery),
      gauges_(settings.engines.size()),
      inflight_(settings.engines.size(), {0, 0}) {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < book_.size(); ++i) {
    if (metrics_ != nullptr) {
      const std::string& iid = book_.engine(i).settings.iid;
      EngineGauges& g = gauges_[i];
      g.inflight[0] = &metrics_->engine_inflight.Add({{"iid", iid}, {"phase", "prefill"}});
      g.inflight[1] = &metrics_->engine_inflight.Add({{"iid", iid}, {"phase", "decode"}});
      for (int c = 1; c < engines::kBreakerClassCount; ++c) {
        const std::string name(engines::BreakerClassName(static_cast<BreakerClass>(c)));
        g.streak[c] = &metrics_->engine_breaker_streak.Add({{"iid", iid}, {"class", name}});
      }
      g.quarantined = &metrics_->engine_quarantined.Add({{"iid", iid}});
      g.in_placement = &metrics_->engine_in_placement.Add({{"iid", iid}});
    }
    PublishLocked(i);
  }
}

void Fleet::PublishAll() {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < book_.size(); ++i) PublishLocked(i);
}

std::optional<Fleet::Reservation> Fleet::PickAndReserve(Phase phase,
                                                        const std::vector<std::string>& excluded,
                                                        const std::string& avoid) {
  const bool prefill = phase == Phase::kPrefill;
  const MonoTime now = clock_.Now();
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Candidate> candidates;
  candidates.reserve(book_.size());
  for (size_t i = 0; i < book_.size(); ++i) {
    const std::string& iid = book_.engine(i).settings.iid;
    if (!book_.Eligible(i, prefill, now)) continue;
    if (std::find(excluded.begin(), excluded.end(), iid) != excluded.end()) continue;
    candidates.push_back(Candidate{i, inflight_[i][PhaseIndex(phase)], !avoid.empty() && iid == avoid});
  }
  const std::optional<size_t> pos = ChooseLeastLoaded(candidates, rotation_++);
  if (!pos) return std::nullopt;
  const size_t index = candidates[*pos].index;
  ++inflight_[index][PhaseIndex(phase)];
  PublishLocked(index);
  Reservation r;
  r.fleet_ = this;
  r.index_ = index;
  r.phase_ = phase;
  r.target_ = engines::EngineTarget{book_.engine(index).settings.iid,
                                    book_.engine(index).settings.url};
  return r;
}

bool Fleet::CanPlace(Phase phase, const std::vector<std::string>& excluded) const {
  const MonoTime now = clock_.Now();
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < book_.size(); ++i) {
    if (!book_.Eligible(i, phase == Phase::kPrefill, now)) continue;
    const std::string& iid = book_.engine(i).settings.iid;
    if (std::find(excluded.begin(), excluded.end(), iid) == excluded.end()) return true;
  }
  return false;
}

void Fleet::ReleaseSlot(size_t index, Phase phase) {
  std::lock_guard<std::mutex> lock(mu_);
  --inflight_[index][PhaseIndex(phase)];
  PublishLocked(index);
}

bool Fleet::RecordFailure(const engines::EngineFailure& failure) {
  if (failure.breaker_class == BreakerClass::kNone) return false;
  std::lock_guard<std::mutex> lock(mu_);
  const int i = book_.Find(failure.evidence_iid);
  if (i < 0) return false;
  const std::string cause = std::string(engines::PhaseName(failure.phase)) + " " +
                            std::string(engines::FailureReasonName(failure.reason)) + ": " +
                            failure.detail;
  const bool quarantined = book_.RecordFailure(i, failure.breaker_class, cause, clock_.Now());
  PublishLocked(i);
  return quarantined;
}

void Fleet::RecordSuccess(const std::string& iid, Success kind) {
  std::lock_guard<std::mutex> lock(mu_);
  const int i = book_.Find(iid);
  if (i < 0) return;
  book_.RecordSuccess(i, kind);
  PublishLocked(i);
}

bool Fleet::Ready(std::string* why) const {
  const MonoTime now = clock_.Now();
  std::lock_guard<std::mutex> lock(mu_);
  const bool prefill = book_.EligibleCount(true, now) > 0;
  const bool decode = book_.EligibleCount(false, now) > 0;
  if (prefill && decode) return true;
  if (why != nullptr) {
    *why = std::string("no engine in placement for the ") +
           (!prefill && !decode ? "prefill and decode roles"
            : !prefill         ? "prefill role"
                               : "decode role");
  }
  return false;
}

std::vector<EngineSnapshot> Fleet::Snapshot() const {
  const MonoTime now = clock_.Now();
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<EngineSnapshot> out;
  out.reserve(book_.size());
  for (size_t i = 0; i < book_.size(); ++i) {
    const EngineBreaker& e = book_.engine(i);
    EngineSnapshot s;
    s.settings = e.settings;
    s.state = book_.State(i, now);
    s.streak = e.streak;
    s.inflight_prefill = inflight_[i][0];
    s.inflight_decode = inflight_[i][1];
    if (e.quarantine && now < e.quarantine->until) {
      s.quarantine_remaining_s = engines::Seconds(e.quarantine->until - now);
      s.quarantine_cause = e.quarantine->cause;
    }
    out.push_back(std::move(s));
  }
  return out;
}

void Fleet::PublishLocked(size_t i) {
  if (metrics_ == nullptr) return;
  const EngineBreaker& e = book_.engine(i);
  const EngineGauges& g = gauges_[i];
  g.inflight[0]->Set(inflight_[i][0]);
  g.inflight[1]->Set(inflight_[i][1]);
  for (int c = 1; c < engines::kBreakerClassCount; ++c) g.streak[c]->Set(e.streak[c]);
  const PlacementState state = book_.State(i, clock_.Now());
  g.quarantined->Set(state == PlacementState::kQuarantined ? 1 : 0);
  g.in_placement->Set(state == PlacementState::kServing ? 1 : 0);
}

}  // namespace narwhal::router
