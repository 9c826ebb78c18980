// BreakerBook: per-engine breaker and placement state, as pure logic.
//
// Per engine it keeps a consecutive-failure streak per failure class (B17),
// the timed quarantine (B15), the inference hold, the ejection, the probe
// schedule with its backoff, and liveness misses; from these it derives the
// placement state. It owns no timers, threads or locks: every call takes
// `now` (the way Envoy's outlier detector takes MonotonicTime), and every
// change it makes is returned as BreakerEvents for the caller to publish.
// Fleet wraps it with a mutex; FleetMonitor runs the probes it asks for.
//
// Rules (reference behaviour §8, SPEC B15/B17):
//  - At recovery.eject_after consecutive failures of one class: `connection`
//    ejects; `timeout` and `overload` ask for a health probe; `stream`,
//    `inference_status` and `kv_handoff` put the engine on an inference hold
//    and ask for an inference probe at once.
//  - The last engine able to serve one of its roles is never held or
//    quarantined and is not ejected by a failed probe; it leaves placement
//    only by a connection or liveness ejection (or an operator). A hold or
//    quarantine ends ("uncovered") when another engine's ejection leaves the
//    held engine the last one able to serve a role.
//  - Stream evidence alone never holds out more than half of a role's
//    engines at once.
//  - A failed probe backs the next one off: readmit_interval_s × failures,
//    capped at kMaxProbeBackoff intervals. An inconclusive probe keeps the
//    normal cadence.
//  - Under the whole_wave restart policy, any ejection holds every engine.
#ifndef NARWHAL_ROUTER_FLEET_BREAKER_BOOK_H_
#define NARWHAL_ROUTER_FLEET_BREAKER_BOOK_H_

#include <absl/container/flat_hash_map.h>

#include <array>
#include <optional>
#include <string>
#include <vector>

#include "engines/api.h"
#include "engines/engine_failure.h"
#include "router/common/settings.h"
#include "router/fleet/fleet_event_kind.h"

namespace narwhal::router {

using engines::BreakerClass;
using engines::MonoTime;
using engines::Phase;

// kDraining: drained by an operator (DrainEngine). kJoining and kLeaving are
// the fleet's membership (B22, B23), not the book's: a joining engine has
// not passed its join checks; a leaving one left the fleet and finishes its
// legs in flight (its wire name is "draining" too: no new legs either way).
enum class PlacementState { kServing, kHeld, kQuarantined, kEjected, kDraining, kJoining, kLeaving };
std::string_view PlacementStateName(PlacementState s);

// Successes that clear streaks (reference behaviour §8, "Clearing on
// success"), with one deliberate difference: a health check says nothing of
// inference legs, so it clears only liveness evidence; every class fed by
// inference legs (connection, timeout, overload, inference_status,
// kv_handoff, stream) is cleared by a leg that succeeded.
enum class Success {
  kEngineRejected,  // engine refused the client's request with a 4xx: it is alive
  kHealth,          // a health probe asked for by a timeout/overload streak passed
  kLiveness,        // a liveness sweep passed
  kPrefillHandoff,  // prefill returned a usable handoff
  kDecodeDone,      // decode stream reached [DONE]
};

enum class ProbeKind { kHealth, kInference, kLiveness };
std::string_view ProbeKindName(ProbeKind k);
inline constexpr ProbeKind kProbeKinds[] = {ProbeKind::kHealth, ProbeKind::kInference,
                                            ProbeKind::kLiveness};

enum class ProbeOutcome { kPassed, kFailed, kInconclusive, kProducerFailed };
std::string_view ProbeOutcomeName(ProbeOutcome o);
inline constexpr ProbeOutcome kProbeOutcomes[] = {ProbeOutcome::kPassed, ProbeOutcome::kFailed,
                                                  ProbeOutcome::kInconclusive,
                                                  ProbeOutcome::kProducerFailed};

// Why an engine was ejected.
enum class EjectCause { kConnection, kLiveness, kHealthProbe, kInferenceProbe, kOperator };
std::string_view EjectCauseName(EjectCause c);
inline constexpr EjectCause kEjectCauses[] = {EjectCause::kConnection, EjectCause::kLiveness,
                                              EjectCause::kHealthProbe,
                                              EjectCause::kInferenceProbe, EjectCause::kOperator};
// The evidence a readmission names: a health probe, an inference
// verification, or the pinned contract's lifecycle checks.
inline constexpr std::string_view kReadmissionEvidence[] = {"health", "verification",
                                                            "lifecycle"};

// One change of breaker state, for metrics, the journal and WatchEvents.
struct BreakerEvent {
  // kEngineHoldStarted, kEngineHoldEnded, kEngineHoldSuppressed,
  // kEngineEjected, kEngineReadmitted, kEngineProbe, kEngineDrained
  FleetEventKind kind = FleetEventKind::kEngineProbe;
  std::string iid;
  HoldKind hold_kind = HoldKind::kNone;  // hold events
  std::string cause;      // why (hold start/end cause, ejection cause, suppression)
  std::string evidence;   // readmission evidence: health | verification | lifecycle | operator
  std::optional<ProbeKind> probe_kind;
  std::optional<ProbeOutcome> outcome;  // probe outcome
  std::string producer;   // inference probe's producer
  std::string detail;     // human-readable detail (the failure, the probe result)
};

struct Quarantine {
  MonoTime until;
  MonoTime started;
  std::string cause;  // the failure that started it
  // Started by stream evidence (a silent first token, mid-stream silence, an
  // invalid termination). A health 200 says nothing about those, so the
  // liveness sweep of such an engine is an inference verification (a real
  // one-token inference), and only its pass ends the quarantine early.
  bool stream_evidence = false;
  Phase side = Phase::kDecode;         // the failed leg's phase
  std::string recorded_producer = {};  // decode side: that leg's producer
};

struct InferenceHold {
  MonoTime started;
  BreakerClass cls = BreakerClass::kStream;
  Phase side = Phase::kDecode;  // the leg whose failures caused it
  std::string recorded_producer;  // decode side: the producer of the failed transfer
  std::string cause;
};

struct Ejection {
  MonoTime at;
  EjectCause cause = EjectCause::kConnection;
  std::string detail;
  // Ejected after a failed inference probe, or while on an inference hold:
  // returns only when an inference probe passes.
  bool inference_suspect = false;
  Phase side = Phase::kDecode;
  std::string recorded_producer;
  bool stream_origin = false;
};

struct LastProbe {
  ProbeKind kind = ProbeKind::kHealth;
  ProbeOutcome outcome = ProbeOutcome::kPassed;
  MonoTime at;
  std::string detail;
};

struct EngineBreaker {
  EngineSettings settings;
  // Which incarnation of the iid (the fleet's record id): a probe's result
  // applies only to the incarnation it probed.
  uint64_t incarnation = 0;
  std::array<int, engines::kBreakerClassCount> streak{};
  std::optional<Quarantine> quarantine;  // the timed hold
  std::optional<InferenceHold> hold;     // the inference hold
  std::optional<Ejection> ejection;
  bool draining = false;
  // Probes
  bool health_probe_due = false;
  // A health probe asked for by a timeout/overload streak passed, and no
  // inference leg succeeded since: the engine answers its health checks
  // while its inference legs fail. The streak's next failure holds it for
  // an inference probe instead of asking for another health probe.
  bool health_passed_in_streak = false;
  MonoTime next_probe_at = MonoTime::max();  // for a hold or an ejection
  int probe_failures = 0;
  bool probe_running = false;
  std::optional<LastProbe> last_probe;
  std::optional<EjectCause> last_ejection_cause;
  std::string last_ejection_detail;
  // Passed a check since start (a health check, a probe, a readmission or
  // a served leg): readiness counts only such engines.
  bool checked = false;
  // Liveness
  int liveness_misses = 0;
  MonoTime last_liveness{};
  // Readmitted on a health check alone and no inference succeeded since: an
  // engine that answers its health checks but fails inference legs (drops
  // every inference connection, refuses the router's key). Ejected again by
  // a connection or liveness streak, it returns only through an inference
  // probe.
  bool unverified_readmission = false;
};

// A probe the monitor should run now.
struct ProbeTask {
  size_t index = 0;  // in the book when it was taken
  ProbeKind kind = ProbeKind::kHealth;
  std::string iid;
  uint64_t incarnation = 0;
};

class BreakerBook {
 public:
  static constexpr int kMaxProbeBackoff = 10;  // intervals

  // `contract_pinned`: readmission probes also ran lifecycle validation
  // (engine_contract configured), so readmissions report evidence
  // "lifecycle".
  BreakerBook(const std::vector<EngineSettings>& engines, const RecoverySettings& recovery,
              bool contract_pinned = false);

  size_t size() const { return engines_.size(); }
  const EngineBreaker& engine(size_t i) const { return engines_[i]; }

  // Membership (B21-B23). A new engine at the end, with the breaker state
  // it had when it left (`restored`, same iid and url) or a fresh one.
  size_t AddEngine(const EngineSettings& settings, uint64_t incarnation,
                   std::optional<EngineBreaker> restored = std::nullopt);
  // Takes engine `i` out (indexes after it shift down) and returns its
  // state, to remember; `events` gets the holds that ended because another
  // engine became the last of its role.
  EngineBreaker RemoveEngine(size_t i, MonoTime now, std::vector<BreakerEvent>* events);
  // A reload's recovery settings, for what follows.
  void SetRecovery(const RecoverySettings& recovery, bool contract_pinned);
  // Index of `iid`, or -1 (a hash lookup: the request path's reports and
  // every probe ask).
  int Find(const std::string& iid) const;

  // Evidence from a failed leg against engine `i`. `side` is the leg's phase
  // as seen from engine `i`; `producer` the decode leg's producer.
  std::vector<BreakerEvent> RecordFailure(size_t i, BreakerClass cls, Phase side,
                                          const std::string& producer, const std::string& cause,
                                          MonoTime now);
  void RecordSuccess(size_t i, Success kind);

  PlacementState State(size_t i, MonoTime now) const;
  // In placement for a leg of this kind now (role permits, state serving,
  // no whole-wave hold).
  bool Eligible(size_t i, bool prefill, MonoTime now) const;
  // Engines in placement able to serve the role.
  int EligibleCount(bool prefill, MonoTime now) const;
  // Of those, the ones that passed a check since start.
  int CheckedEligibleCount(bool prefill, MonoTime now) const;
  // Role permits and state serving, whatever a whole-wave hold says (probes
  // of the engine holding the wave must still find peers).
  bool Serves(size_t i, bool prefill, MonoTime now) const;
  // Under whole_wave: the ejected engine holding the fleet, else empty.
  std::string WaveHoldReason() const;

  // Probes due at `now`, marked running. `idle[i]` says whether engine i has
  // no legs in flight (liveness sweeps check only idle engines).
  std::vector<ProbeTask> TakeDueProbes(MonoTime now, const std::vector<bool>& idle);
  // The result of a probe TakeDueProbes handed out.
  std::vector<BreakerEvent> CompleteProbe(size_t i, ProbeKind kind, ProbeOutcome outcome,
                                          const std::string& detail, const std::string& producer,
                                          MonoTime now);
  // A probe handed out that will not run (its engine is not the breaker's
  // to probe now).
  void ProbeDone(size_t i) { engines_[i].probe_running = false; }
  // What an inference probe of engine `i` should exercise.
  Phase ProbeSide(size_t i) const;
  std::string RecordedProducer(size_t i) const;

  // Operator actions.
  std::vector<BreakerEvent> Eject(size_t i, EjectCause cause, const std::string& detail,
                                  MonoTime now);
  std::vector<BreakerEvent> Drain(size_t i, MonoTime now);
  // Back to placement after a passed validation (or an operator's word).
  std::vector<BreakerEvent> Readmit(size_t i, const std::string& evidence, MonoTime now);
  // Ends quarantines whose time is up (events with cause "expired").
  std::vector<BreakerEvent> ExpireQuarantines(MonoTime now);
  // True while a quarantine started by stream evidence runs.
  bool StreamQuarantined(size_t i, MonoTime now) const;
  // Ends a quarantine early. Empty when none was running.
  std::vector<BreakerEvent> ReleaseQuarantine(size_t i, const std::string& cause);

  // True if taking engine `i` out would leave one of its roles with no
  // engine in placement.
  bool IsLastForARole(size_t i, MonoTime now) const;

 private:
  bool StreamCapReached(size_t i, MonoTime now) const;
  MonoTime NextProbeAfterFailure(EngineBreaker& e, MonoTime now) const;
  void EndHolds(size_t i, const std::string& cause, MonoTime now,
                std::vector<BreakerEvent>* events);
  // Ends the holds of engines that became the last able to serve a role
  // (cause "uncovered"): they are never held out on probe or quarantine
  // grounds.
  void ReleaseUncovered(MonoTime now, std::vector<BreakerEvent>* events);
  // Indexes engines_ by iid again (after an engine left: indexes shift).
  void Reindex();

  std::vector<EngineBreaker> engines_;
  absl::flat_hash_map<std::string, size_t> index_;  // iid -> first engine with it
  RecoverySettings recovery_;
  bool contract_pinned_;
};

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_FLEET_BREAKER_BOOK_H_
