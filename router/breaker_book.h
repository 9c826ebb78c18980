// BreakerBook: per-engine breaker and placement state, as pure logic.
//
// Holds, per engine, a consecutive-failure streak per failure class (B17),
// the timed quarantine (B15), and the placement state the placement code
// reads. It owns no timers and no locks: every call takes `now`, the way
// Envoy's outlier detector does, so it is tested with plain values. Fleet
// wraps it with a mutex, metrics and events.
#ifndef NARWHAL_ROUTER_BREAKER_BOOK_H_
#define NARWHAL_ROUTER_BREAKER_BOOK_H_

#include <array>
#include <optional>
#include <string>
#include <vector>

#include "engines/api.h"
#include "engines/engine_failure.h"
#include "router/settings.h"

namespace narwhal::router {

using engines::BreakerClass;
using engines::MonoTime;

enum class PlacementState { kServing, kHeld, kQuarantined, kEjected, kDraining };
std::string_view PlacementStateName(PlacementState s);

// Successes that clear streaks (reference behaviour §8, "Clearing on success").
enum class Success {
  kEngineRejected,  // engine answered a 4xx other than 408/429: it is alive
  kHealth,          // health probe 200
  kPrefillHandoff,  // prefill returned a usable handoff
  kDecodeDone,      // decode stream reached [DONE]
};

struct Quarantine {
  MonoTime until;
  MonoTime started;
  std::string cause;  // the failure that started it: "<phase> <reason>: <detail>"
};

struct EngineBreaker {
  EngineSettings settings;
  std::array<int, engines::kBreakerClassCount> streak{};
  std::optional<Quarantine> quarantine;
  bool draining = false;
};

class BreakerBook {
 public:
  BreakerBook(const std::vector<EngineSettings>& engines, const RecoverySettings& recovery);

  size_t size() const { return engines_.size(); }
  const EngineBreaker& engine(size_t i) const { return engines_[i]; }
  // Index of `iid`, or -1.
  int Find(const std::string& iid) const;

  // A failed leg's evidence against engine `i`. Returns true if this failure
  // started a timed quarantine (B15).
  bool RecordFailure(size_t i, BreakerClass cls, const std::string& cause, MonoTime now);
  void RecordSuccess(size_t i, Success kind);

  PlacementState State(size_t i, MonoTime now) const;
  // In placement for a leg of this kind now (role permits and state serving).
  bool Eligible(size_t i, bool prefill, MonoTime now) const;
  // Engines in placement able to serve the role.
  int EligibleCount(bool prefill, MonoTime now) const;

  // Ends a quarantine early (operator release). False if none was running.
  bool ReleaseQuarantine(size_t i);

 private:
  // True if taking engine `i` out would leave one of its roles with no
  // engine in placement (last-engine protection).
  bool IsLastForARole(size_t i, MonoTime now) const;

  std::vector<EngineBreaker> engines_;
  RecoverySettings recovery_;
};

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_BREAKER_BOOK_H_
