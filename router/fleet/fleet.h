// Fleet: the engines, their in-flight legs and their breaker state, shared by
// every request, the fleet monitor and the admin service. Thread-safe (one
// mutex; every operation is short and does no I/O).
//
// Placement and reservation happen together (PickAndReserve) so concurrent
// requests see each other's legs. A Reservation is RAII: its destruction
// releases the slot on every path (B7). Every breaker change is published
// once: to the metrics, the journal (event rows) and the event bus.
#ifndef NARWHAL_ROUTER_FLEET_FLEET_H_
#define NARWHAL_ROUTER_FLEET_FLEET_H_

#include <array>
#include <atomic>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <absl/status/status.h>

#include "engines/engine_client.h"
#include "engines/engine_failure.h"
#include "router/common/clock.h"
#include "router/common/journal.h"
#include "router/common/metrics.h"
#include "router/common/settings.h"
#include "router/fleet/breaker_book.h"
#include "router/fleet/event_bus.h"
#include "router/fleet/fleet_event.h"
#include "router/fleet/fleet_event_counts.h"
#include "router/fleet/kv_recompute.h"
#include "router/fleet/link_book.h"
#include "router/fleet/placement.h"
#include "router/fleet/prefix_index.h"

namespace narwhal::router {

// A read-only view of one producer→consumer link (admin API, tests).
struct LinkSnapshot {
  std::string producer;
  std::string consumer;
  LinkState state = LinkState::kServing;
  double since = 0;  // unix seconds the state began
  std::string cause;
  int streak = 0;
  long long successes = 0;
  long long failures = 0;
  std::optional<double> last_success_age_s;
  std::optional<double> last_failure_age_s;
  std::string last_failure;
  std::optional<double> next_probe_in_s;
  int probe_failures = 0;
  bool probe_running = false;
};

// A scrape of one consumer's /metrics the monitor should run now (its
// failed-transfer counter, router/fleet/kv_recompute.h).
struct RecomputeScrapeTask {
  size_t index = 0;
};

// A read-only view of one engine (admin API, /ready, tests).
struct EngineSnapshot {
  EngineSettings settings;
  PlacementState state = PlacementState::kServing;
  std::array<int, engines::kBreakerClassCount> streak{};
  int inflight_prefill = 0;
  int inflight_decode = 0;
  // Decode legs placed here whose prefill still runs.
  int reserved_decode = 0;
  // Entries of its prefix index (cache_aware placement; 0 otherwise).
  size_t prefix_index_chunks = 0;
  // The hold keeping it out, if any: "timed" (quarantine) or "inference".
  std::string hold_kind;
  std::optional<double> hold_remaining_s;  // timed holds only
  std::string hold_cause;
  std::optional<double> held_for_s;
  // Ejection.
  std::string ejection_cause;
  std::string ejection_detail;
  std::optional<double> ejected_for_s;
  std::string last_ejection_cause;
  // Ejected and readmitted only through an inference probe (ejected by a
  // failed one, or while on an inference hold).
  bool inference_suspect = false;
  // Probes.
  std::string last_probe_kind;
  std::string last_probe_outcome;
  std::string last_probe_detail;
  std::optional<double> last_probe_age_s;
  std::optional<double> next_probe_in_s;
  int probe_failures = 0;
  bool probe_running = false;
  int liveness_misses = 0;
  // Why it is out of placement, in one sentence ("" when serving).
  std::string explanation;
};

// How one leg was placed (journal and metrics).
struct PlacementInfo {
  PlacementReason reason = PlacementReason::kLeastLoaded;
  size_t match_bytes = 0;   // prompt bytes the producer's prefix index held
  size_t prompt_bytes = 0;  // bytes of the prompt's rendered text
};

class Fleet {
 public:
  // `metrics`, `journal` and `events` may be null.
  Fleet(const Settings& settings, const Clock& clock, Metrics* metrics, Journal* journal = nullptr,
        EventBus* events = nullptr);

  class Reservation {
   public:
    Reservation() = default;
    Reservation(Reservation&& other) noexcept { *this = std::move(other); }
    Reservation& operator=(Reservation&& other) noexcept;
    ~Reservation() { Release(); }
    void Release();
    const engines::EngineTarget& target() const { return target_; }
    PlacementReason reason() const { return reason_; }
    explicit operator bool() const { return fleet_ != nullptr; }

   private:
    friend class Fleet;
    Fleet* fleet_ = nullptr;
    size_t index_ = 0;
    Phase phase_ = Phase::kPrefill;
    bool reserved_ = false;  // a decode leg whose prefill runs (ReserveDecode)
    PlacementReason reason_ = PlacementReason::kLeastLoaded;
    engines::EngineTarget target_;
  };

  // Places a leg: an engine in placement for `phase`, not in `excluded`,
  // least in-flight first; `avoid` (decode: the producer, B5) only when no
  // other engine can take it. Nullopt when no engine can.
  // Prefill with `key` under placement.prefill "cache_aware": the longest
  // prefix match instead (ChooseCacheAware), and the prompt is indexed for
  // the chosen producer. Decode counts reserved legs as load too. `info`,
  // when given, says why.
  std::optional<Reservation> PickAndReserve(Phase phase, const std::vector<std::string>& excluded,
                                            const std::string& avoid = "",
                                            const PromptKey* key = nullptr,
                                            PlacementInfo* info = nullptr);
  // A decode leg placed before its prefill runs: counted as reserved on the
  // consumer (placement load, not in flight), so a burst of prefills spreads
  // over the consumers before any decode starts. Activate() it once the
  // handoff exists.
  std::optional<Reservation> ReserveDecode(const std::vector<std::string>& excluded,
                                           const std::string& avoid, PlacementInfo* info = nullptr);
  // Turns a ReserveDecode() reservation into an in-flight leg when its
  // consumer is still in placement and not in `excluded`; else releases it
  // and returns false (place the leg again).
  bool Activate(Reservation& reservation, const std::vector<std::string>& excluded);
  // Whether a leg of `phase` could be placed outside `excluded` now.
  bool CanPlace(Phase phase, const std::vector<std::string>& excluded) const;

  // Breaker evidence from a failed client leg (uses failure.evidence_iid and
  // breaker_class; no-op for kNone). `producer` is the attempt's producer.
  void RecordFailure(const engines::EngineFailure& failure, const std::string& producer = "");
  void RecordSuccess(const std::string& iid, Success kind);

  // --- per-link health (fleet_links.cc; router/fleet/link_book.h) ---
  // A crossed decode producer→consumer reached [DONE]. (Failures are
  // attributed by RecordFailure.)
  void RecordLinkSuccess(const std::string& producer, const std::string& consumer);
  std::vector<LinkProbeTask> TakeDueLinkProbes();
  void CompleteLinkProbe(const LinkProbeTask& task, LinkProbeOutcome outcome,
                         const std::string& detail);
  std::vector<LinkSnapshot> Links() const;

  // --- silent-recompute detection (fleet_recompute.cc; router/fleet/kv_recompute.h) ---
  static constexpr double kRecomputeScrapeIntervalS = 1;
  // A crossed decode producer→consumer was sent.
  void RecomputeDecodeStarted(const std::string& producer, const std::string& consumer);
  // It ended: `suspected` when its usage says the consumer recomputed the
  // prompt (rule (a); counted on the consumer, logged with `evidence`, and a
  // failure of the link), `failed` when the decode failed.
  void RecomputeDecodeEnded(const std::string& producer, const std::string& consumer,
                            bool suspected, bool failed, const std::string& evidence);
  // A link probe's decode ended; `explained`: it recomputed (rule (a)) or
  // failed. Never counted (the probe's outcome records it), but it explains
  // a failed transfer on the consumer. Pair with RecomputeDecodeStarted.
  void RecomputeProbeEnded(const std::string& producer, const std::string& consumer,
                           bool explained);
  // Consumers whose /metrics are due (every kRecomputeScrapeIntervalS),
  // marked running.
  std::vector<RecomputeScrapeTask> TakeDueRecomputeScrapes();
  // The scrape's failed-transfer counter (nullopt: none, or no answer).
  void CompleteRecomputeScrape(const RecomputeScrapeTask& task,
                               std::optional<double> failed_transfers);

  // --- fleet monitor ---
  // Probes due now (marked running), and timed holds that expired.
  std::vector<ProbeTask> TakeDueProbes();
  void CompleteProbe(const ProbeTask& task, ProbeOutcome outcome, const std::string& detail,
                     const std::string& producer = "");
  // A probe attempt that did not settle the probe (a producer that failed).
  void RecordProbeAttempt(const ProbeTask& task, ProbeOutcome outcome, const std::string& producer,
                          const std::string& detail);
  // What an inference probe of `index` exercises: the phase of the failures
  // that held it, and (decode side) the producer of the failed transfer.
  Phase ProbeSide(size_t index) const;
  std::string RecordedProducer(size_t index) const;
  engines::EngineTarget Target(size_t index) const;
  // Whether engine `index` passed a check since start (counts for Ready).
  bool Checked(size_t index) const;
  // Live engines able to prefill, fewest prefill legs in flight first, then
  // by iid, excluding `except`.
  std::vector<engines::EngineTarget> LiveProducers(const std::string& except) const;
  std::optional<engines::EngineTarget> LiveConsumer(const std::string& except) const;

  // --- operators (admin service) ---
  absl::Status Eject(const std::string& iid, const std::string& detail);
  absl::Status Drain(const std::string& iid);
  // Back into placement after the caller's validation passed.
  absl::Status Readmit(const std::string& iid, const std::string& evidence);
  absl::Status ReleaseQuarantine(const std::string& iid);
  int Find(const std::string& iid) const;

  // True when every role has an engine in placement that passed a check
  // since start; else *why says which not.
  bool Ready(std::string* why) const;
  std::vector<EngineSnapshot> Snapshot() const;
  const std::vector<EngineSettings>& engines() const { return settings_.engines; }
  // Refreshes every engine's gauges (time-based states such as a quarantine
  // expire without an event); called before metrics are scraped.
  void PublishAll();
  // Publishes an event that is not a breaker or link change (a preflight
  // run, a refused readmission): counted once (FleetEventCounts: metrics
  // and the admin counters), logged, then serialized to the event bus and
  // the journal.
  void Publish(const FleetEvent& event);
  // Publishes an event already in its wire form (logged at info, not
  // counted): for markers and tests.
  void PublishEvent(nlohmann::json event);
  // Each engine's event counts since start (admin GetBreakers).
  std::map<std::string, EngineEventCounts> EventCounts() const { return counts_.Engines(); }

  // --- the model's context length (fleet_model_len.cc) ---
  // max_model_len as engine `iid` reports it on /v1/models. The fleet keeps
  // the smallest reported (or the pinned engine_contract.max_model_len):
  // a request that cannot fit in it is refused before any prefill.
  void RecordMaxModelLen(const std::string& iid, long long max_model_len);
  // 0 while unknown. Lock-free: read on every request.
  long long max_model_len() const;

 private:
  void ReleaseSlot(size_t index, Phase phase, bool reserved);
  // Candidates for a leg of `phase` (mu_ held).
  std::vector<Candidate> CandidatesLocked(Phase phase, const std::vector<std::string>& excluded,
                                          const std::string& avoid, MonoTime now) const;
  void CountDecision(Phase phase, PlacementReason reason);
  // An ejected or readmitted engine's cache is gone: so is its index.
  void ForgetCaches(const std::vector<BreakerEvent>& events);
  void PublishLocked(size_t index);  // refresh the engine's gauges
  void PublishAllLocked();
  // Metrics, journal and event bus for breaker events (called without mu_).
  void Emit(const std::vector<BreakerEvent>& events);
  EngineSnapshot SnapshotLocked(size_t i, MonoTime now) const;
  // Link evidence from a failed crossed decode; link gauges and events.
  void RecordLinkFailure(const engines::EngineFailure& failure, const std::string& producer);
  void InitLinkGauges();
  void InitRecompute();
  // Counts `n` suspected recomputes on engine `index` (mu_ not held).
  void CountRecompute(size_t index, long long n);
  void EmitLinks(const std::vector<LinkEvent>& events);

  // Cached series per engine; null without metrics.
  struct EngineGauges {
    std::array<prometheus::Gauge*, 2> inflight{};
    std::array<prometheus::Gauge*, engines::kBreakerClassCount> streak{};
    prometheus::Gauge* quarantined = nullptr;
    prometheus::Gauge* in_placement = nullptr;
    prometheus::Gauge* held_timed = nullptr;
    prometheus::Gauge* held_inference = nullptr;
  };

  const Settings& settings_;
  const Clock& clock_;
  Metrics* metrics_;
  Journal* journal_;
  EventBus* events_;
  FleetEventCounts counts_;
  mutable std::mutex mu_;
  BreakerBook book_;
  LinkBook links_;
  std::vector<prometheus::Gauge*> link_gauges_;  // per link; empty without metrics
  std::vector<EngineGauges> gauges_;
  std::vector<std::array<int, 2>> inflight_;  // [engine][phase]
  std::vector<int> reserved_;                 // [engine] decode legs placed before their prefill
  std::vector<PrefixIndex> indexes_;          // [engine] cache_aware prefill placement
  std::array<size_t, 2> rotation_{};  // per phase, so each spreads on its own
  // Silent-recompute detection.
  RecomputeLedger recompute_;
  std::vector<prometheus::Counter*> recompute_counters_;  // [engine]; null: not a consumer
  std::vector<MonoTime> next_scrape_;                      // [engine]
  std::vector<bool> scrape_running_;                       // [engine]
  std::atomic<long long> max_model_len_{0};
};

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_FLEET_FLEET_H_
