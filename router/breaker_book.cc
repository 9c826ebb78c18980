#include "router/breaker_book.h"

namespace narwhal::router {

std::string_view PlacementStateName(PlacementState s) {
  switch (s) {
    case PlacementState::kServing:
      return "serving";
    case PlacementState::kHeld:
      return "held";
    case PlacementState::kQuarantined:
      return "quarantined";
    case PlacementState::kEjected:
      return "ejected";
    case PlacementState::kDraining:
      return "draining";
  }
  return "serving";
}

BreakerBook::BreakerBook(const std::vector<EngineSettings>& engines,
                         const RecoverySettings& recovery)
    : recovery_(recovery) {
  engines_.reserve(engines.size());
  for (const EngineSettings& e : engines) {
    EngineBreaker b;
    b.settings = e;
    engines_.push_back(std::move(b));
  }
}

int BreakerBook::Find(const std::string& iid) const {
  for (size_t i = 0; i < engines_.size(); ++i) {
    if (engines_[i].settings.iid == iid) return static_cast<int>(i);
  }
  return -1;
}

bool BreakerBook::RecordFailure(size_t i, BreakerClass cls, const std::string& cause,
                                MonoTime now) {
  if (cls == BreakerClass::kNone) return false;
  EngineBreaker& e = engines_[i];
  ++e.streak[static_cast<int>(cls)];
  if (recovery_.failure_quarantine_s <= 0) return false;
  if (State(i, now) != PlacementState::kServing) return false;
  if (IsLastForARole(i, now)) return false;  // B15: never the last engine of a role
  e.quarantine = Quarantine{now + engines::FromSeconds(recovery_.failure_quarantine_s), now, cause};
  return true;
}

void BreakerBook::RecordSuccess(size_t i, Success kind) {
  auto& s = engines_[i].streak;
  auto clear = [&s](BreakerClass c) { s[static_cast<int>(c)] = 0; };
  switch (kind) {
    case Success::kEngineRejected:
      clear(BreakerClass::kConnection);
      clear(BreakerClass::kInferenceStatus);
      break;
    case Success::kHealth:
      clear(BreakerClass::kConnection);
      clear(BreakerClass::kTimeout);
      clear(BreakerClass::kOverload);
      clear(BreakerClass::kLiveness);
      break;
    case Success::kPrefillHandoff:
      clear(BreakerClass::kConnection);
      clear(BreakerClass::kInferenceStatus);
      clear(BreakerClass::kKvHandoff);
      break;
    case Success::kDecodeDone:
      clear(BreakerClass::kConnection);
      clear(BreakerClass::kInferenceStatus);
      clear(BreakerClass::kStream);
      break;
  }
}

PlacementState BreakerBook::State(size_t i, MonoTime now) const {
  const EngineBreaker& e = engines_[i];
  if (e.draining) return PlacementState::kDraining;
  if (e.quarantine && now < e.quarantine->until) return PlacementState::kQuarantined;
  return PlacementState::kServing;
}

bool BreakerBook::Eligible(size_t i, bool prefill, MonoTime now) const {
  const Role role = engines_[i].settings.role;
  if (prefill ? !CanPrefill(role) : !CanDecode(role)) return false;
  return State(i, now) == PlacementState::kServing;
}

int BreakerBook::EligibleCount(bool prefill, MonoTime now) const {
  int n = 0;
  for (size_t i = 0; i < engines_.size(); ++i) n += Eligible(i, prefill, now) ? 1 : 0;
  return n;
}

bool BreakerBook::ReleaseQuarantine(size_t i) {
  if (!engines_[i].quarantine) return false;
  engines_[i].quarantine.reset();
  return true;
}

bool BreakerBook::IsLastForARole(size_t i, MonoTime now) const {
  const Role role = engines_[i].settings.role;
  if (CanPrefill(role) && EligibleCount(/*prefill=*/true, now) <= 1) return true;
  if (CanDecode(role) && EligibleCount(/*prefill=*/false, now) <= 1) return true;
  return false;
}

}  // namespace narwhal::router
