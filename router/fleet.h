// Fleet: the engines, their in-flight legs and their breaker state, shared by
// every request. Thread-safe (one mutex; every operation is short).
//
// Placement and reservation happen together (PickAndReserve) so concurrent
// requests see each other's legs. A Reservation is RAII: its destruction
// releases the slot on every path (B7).
#ifndef NARWHAL_ROUTER_FLEET_H_
#define NARWHAL_ROUTER_FLEET_H_

#include <array>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engines/engine_client.h"
#include "engines/engine_failure.h"
#include "router/breaker_book.h"
#include "router/clock.h"
#include "router/metrics.h"
#include "router/settings.h"

namespace narwhal::router {

using engines::Phase;

// A read-only view of one engine (admin API, /ready, tests).
struct EngineSnapshot {
  EngineSettings settings;
  PlacementState state = PlacementState::kServing;
  std::array<int, engines::kBreakerClassCount> streak{};
  int inflight_prefill = 0;
  int inflight_decode = 0;
  std::optional<double> quarantine_remaining_s;
  std::string quarantine_cause;
};

class Fleet {
 public:
  // `metrics` may be null (tests).
  Fleet(const Settings& settings, const Clock& clock, Metrics* metrics);

  class Reservation {
   public:
    Reservation() = default;
    Reservation(Reservation&& other) noexcept { *this = std::move(other); }
    Reservation& operator=(Reservation&& other) noexcept;
    ~Reservation() { Release(); }
    void Release();
    const engines::EngineTarget& target() const { return target_; }
    explicit operator bool() const { return fleet_ != nullptr; }

   private:
    friend class Fleet;
    Fleet* fleet_ = nullptr;
    size_t index_ = 0;
    Phase phase_ = Phase::kPrefill;
    engines::EngineTarget target_;
  };

  // Places a leg: an engine in placement for `phase`, not in `excluded`,
  // least in-flight first; `avoid` (decode: the producer, B5) only when no
  // other engine can take it. Nullopt when no engine can.
  std::optional<Reservation> PickAndReserve(Phase phase, const std::vector<std::string>& excluded,
                                            const std::string& avoid = "");
  // Whether a leg of `phase` could be placed outside `excluded` now.
  bool CanPlace(Phase phase, const std::vector<std::string>& excluded) const;

  // Breaker evidence from a failed leg (uses failure.evidence_iid and
  // breaker_class; no-op for kNone). Returns true if it started a quarantine.
  bool RecordFailure(const engines::EngineFailure& failure);
  void RecordSuccess(const std::string& iid, Success kind);

  // True when every role has an engine in placement; else *why says which not.
  bool Ready(std::string* why) const;
  std::vector<EngineSnapshot> Snapshot() const;
  // Refreshes every engine's gauges (time-based states such as a quarantine
  // expire without an event); called before metrics are scraped.
  void PublishAll();
  const std::vector<EngineSettings>& engines() const { return settings_.engines; }

 private:
  void ReleaseSlot(size_t index, Phase phase);
  void PublishLocked(size_t index);  // refresh the engine's gauges

  const Settings& settings_;
  const Clock& clock_;
  Metrics* metrics_;
  // Cached series per engine; null without metrics.
  struct EngineGauges {
    std::array<prometheus::Gauge*, 2> inflight{};
    std::array<prometheus::Gauge*, engines::kBreakerClassCount> streak{};
    prometheus::Gauge* quarantined = nullptr;
    prometheus::Gauge* in_placement = nullptr;
  };

  mutable std::mutex mu_;
  BreakerBook book_;
  std::vector<EngineGauges> gauges_;
  std::vector<std::array<int, 2>> inflight_;  // [engine][phase]
  size_t rotation_ = 0;
};

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_FLEET_H_
