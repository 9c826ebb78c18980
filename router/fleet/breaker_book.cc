#include "router/fleet/breaker_book.h"

#include <algorithm>

namespace narwhal::router {
namespace {

BreakerEvent Event(FleetEventKind kind, const std::string& iid) {
  BreakerEvent e;
  e.kind = kind;
  e.iid = iid;
  return e;
}

}  // namespace

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
    case PlacementState::kLeaving:
      return "draining";
    case PlacementState::kJoining:
      return "joining";
  }
  return "serving";
}

std::string_view ProbeKindName(ProbeKind k) {
  switch (k) {
    case ProbeKind::kHealth:
      return "health";
    case ProbeKind::kInference:
      return "inference";
    case ProbeKind::kLiveness:
      return "liveness";
  }
  return "health";
}

std::string_view ProbeOutcomeName(ProbeOutcome o) {
  switch (o) {
    case ProbeOutcome::kPassed:
      return "passed";
    case ProbeOutcome::kFailed:
      return "failed";
    case ProbeOutcome::kInconclusive:
      return "inconclusive";
    case ProbeOutcome::kProducerFailed:
      return "producer_failed";
  }
  return "inconclusive";
}

std::string_view EjectCauseName(EjectCause c) {
  switch (c) {
    case EjectCause::kConnection:
      return "connection";
    case EjectCause::kLiveness:
      return "liveness";
    case EjectCause::kHealthProbe:
      return "health_probe";
    case EjectCause::kInferenceProbe:
      return "inference_probe";
    case EjectCause::kOperator:
      return "operator";
  }
  return "operator";
}

BreakerBook::BreakerBook(const std::vector<EngineSettings>& engines,
                         const RecoverySettings& recovery, bool contract_pinned)
    : recovery_(recovery), contract_pinned_(contract_pinned) {
  engines_.reserve(engines.size());
  for (const EngineSettings& e : engines) {
    EngineBreaker b;
    b.settings = e;
    engines_.push_back(std::move(b));
  }
  Reindex();
}

size_t BreakerBook::AddEngine(const EngineSettings& settings, uint64_t incarnation,
                              std::optional<EngineBreaker> restored) {
  EngineBreaker b = restored ? std::move(*restored) : EngineBreaker{};
  b.settings = settings;
  b.incarnation = incarnation;
  b.probe_running = false;
  engines_.push_back(std::move(b));
  index_.emplace(engines_.back().settings.iid, engines_.size() - 1);
  return engines_.size() - 1;
}

EngineBreaker BreakerBook::RemoveEngine(size_t i, MonoTime now,
                                        std::vector<BreakerEvent>* events) {
  EngineBreaker gone = std::move(engines_[i]);
  engines_.erase(engines_.begin() + static_cast<std::ptrdiff_t>(i));
  Reindex();
  ReleaseUncovered(now, events);
  return gone;
}

void BreakerBook::Reindex() {
  index_.clear();
  index_.reserve(engines_.size());
  for (size_t i = 0; i < engines_.size(); ++i) index_.emplace(engines_[i].settings.iid, i);
}

void BreakerBook::SetRecovery(const RecoverySettings& recovery, bool contract_pinned) {
  recovery_ = recovery;
  contract_pinned_ = contract_pinned;
}

int BreakerBook::Find(const std::string& iid) const {
  const auto it = index_.find(iid);
  return it == index_.end() ? -1 : static_cast<int>(it->second);
}

PlacementState BreakerBook::State(size_t i, MonoTime now) const {
  const EngineBreaker& e = engines_[i];
  if (e.draining) return PlacementState::kDraining;
  if (e.ejection) return PlacementState::kEjected;
  if (e.hold) return PlacementState::kHeld;
  if (e.quarantine && now < e.quarantine->until) return PlacementState::kQuarantined;
  return PlacementState::kServing;
}

std::string BreakerBook::WaveHoldReason() const {
  if (recovery_.engine_restart_policy != RestartPolicy::kWholeWave) return "";
  for (const EngineBreaker& e : engines_) {
    if (e.ejection) {
      return "whole-wave hold: engine " + e.settings.iid + " is ejected (" +
             std::string(EjectCauseName(e.ejection->cause)) + ")";
    }
  }
  return "";
}

bool BreakerBook::Serves(size_t i, bool prefill, MonoTime now) const {
  const Role role = engines_[i].settings.role;
  if (prefill ? !CanPrefill(role) : !CanDecode(role)) return false;
  return State(i, now) == PlacementState::kServing;
}

bool BreakerBook::Eligible(size_t i, bool prefill, MonoTime now) const {
  return Serves(i, prefill, now) && WaveHoldReason().empty();
}

int BreakerBook::EligibleCount(bool prefill, MonoTime now) const {
  int n = 0;
  for (size_t i = 0; i < engines_.size(); ++i) n += Eligible(i, prefill, now) ? 1 : 0;
  return n;
}

int BreakerBook::CheckedEligibleCount(bool prefill, MonoTime now) const {
  int n = 0;
  for (size_t i = 0; i < engines_.size(); ++i) {
    n += engines_[i].checked && Eligible(i, prefill, now) ? 1 : 0;
  }
  return n;
}

bool BreakerBook::IsLastForARole(size_t i, MonoTime now) const {
  const Role role = engines_[i].settings.role;
  for (const bool prefill : {true, false}) {
    if (prefill ? !CanPrefill(role) : !CanDecode(role)) continue;
    bool other = false;
    for (size_t j = 0; j < engines_.size() && !other; ++j) {
      if (j == i) continue;
      const Role r = engines_[j].settings.role;
      other = (prefill ? CanPrefill(r) : CanDecode(r)) && State(j, now) == PlacementState::kServing;
    }
    if (!other) return true;
  }
  return false;
}

bool BreakerBook::StreamCapReached(size_t i, MonoTime) const {
  const Role role = engines_[i].settings.role;
  for (const bool prefill : {true, false}) {
    if (prefill ? !CanPrefill(role) : !CanDecode(role)) continue;
    int members = 0;
    int out_by_stream = 0;
    for (size_t j = 0; j < engines_.size(); ++j) {
      const EngineBreaker& e = engines_[j];
      if (!(prefill ? CanPrefill(e.settings.role) : CanDecode(e.settings.role))) continue;
      ++members;
      if (j == i) continue;
      if ((e.hold && e.hold->cls == BreakerClass::kStream) ||
          (e.ejection && e.ejection->stream_origin)) {
        ++out_by_stream;
      }
    }
    if ((out_by_stream + 1) * 2 > members) return true;
  }
  return false;
}

void BreakerBook::EndHolds(size_t i, const std::string& cause, MonoTime now,
                           std::vector<BreakerEvent>* events) {
  EngineBreaker& e = engines_[i];
  if (e.quarantine) {
    if (now < e.quarantine->until) {
      BreakerEvent ev = Event(FleetEventKind::kEngineHoldEnded, e.settings.iid);
      ev.hold_kind = HoldKind::kTimed;
      ev.cause = cause;
      events->push_back(ev);
    }
    e.quarantine.reset();
  }
  if (e.hold) {
    BreakerEvent ev = Event(FleetEventKind::kEngineHoldEnded, e.settings.iid);
    ev.hold_kind = HoldKind::kInference;
    ev.cause = cause;
    events->push_back(ev);
    e.hold.reset();
  }
}

std::vector<BreakerEvent> BreakerBook::RecordFailure(size_t i, BreakerClass cls, Phase side,
                                                     const std::string& producer,
                                                     const std::string& cause, MonoTime now) {
  std::vector<BreakerEvent> events;
  if (cls == BreakerClass::kNone) return events;
  EngineBreaker& e = engines_[i];
  const int streak = ++e.streak[static_cast<int>(cls)];

  if (streak >= recovery_.eject_after) {
    switch (cls) {
      case BreakerClass::kConnection:
        if (!e.ejection) {
          for (BreakerEvent& ev : Eject(i, EjectCause::kConnection, cause, now)) {
            events.push_back(std::move(ev));
          }
        }
        break;
      case BreakerClass::kTimeout:
      case BreakerClass::kOverload:
        if (!e.health_passed_in_streak) {
          e.health_probe_due = true;
          break;
        }
        // Its health probe passed and its legs still fail: only an
        // inference probe can tell, as for the classes below.
        [[fallthrough]];
      case BreakerClass::kStream:
      case BreakerClass::kInferenceStatus:
      case BreakerClass::kKvHandoff: {
        if (e.hold || e.ejection || e.draining) break;
        std::string suppressed;
        if (IsLastForARole(i, now)) {
          suppressed = "last engine able to serve its role";
        } else if (cls == BreakerClass::kStream && StreamCapReached(i, now)) {
          suppressed = "stream evidence already holds out half of the role's engines";
        }
        if (!suppressed.empty()) {
          BreakerEvent ev = Event(FleetEventKind::kEngineHoldSuppressed, e.settings.iid);
          ev.hold_kind = HoldKind::kInference;
          ev.cause = suppressed;
          ev.detail = cause;
          events.push_back(ev);
          break;
        }
        if (e.quarantine) {
          if (now < e.quarantine->until) {
            BreakerEvent ev = Event(FleetEventKind::kEngineHoldEnded, e.settings.iid);
            ev.hold_kind = HoldKind::kTimed;
            ev.cause = "superseded";
            events.push_back(ev);
          }
          e.quarantine.reset();
        }
        e.hold = InferenceHold{now, cls, side, producer, cause};
        e.next_probe_at = now;  // probe at once
        e.probe_failures = 0;
        BreakerEvent ev = Event(FleetEventKind::kEngineHoldStarted, e.settings.iid);
        ev.hold_kind = HoldKind::kInference;
        ev.cause = std::string(engines::BreakerClassName(cls)) + " streak reached " +
                   std::to_string(streak);
        ev.detail = cause;
        events.push_back(ev);
        break;
      }
      default:
        break;
    }
  }

  // More stream evidence against a running quarantine: only an inference
  // verification may end it early now.
  if (cls == BreakerClass::kStream && e.quarantine && now < e.quarantine->until &&
      !e.quarantine->stream_evidence) {
    e.quarantine->stream_evidence = true;
    e.quarantine->side = side;
    e.quarantine->recorded_producer = producer;
  }

  // B15: a timed exclusion of an engine still in placement, while breaker
  // state catches up — never of the last engine able to serve a role.
  if (recovery_.failure_quarantine_s > 0 && State(i, now) == PlacementState::kServing &&
      !IsLastForARole(i, now)) {
    Quarantine q;
    q.until = now + engines::FromSeconds(recovery_.failure_quarantine_s);
    q.started = now;
    q.cause = cause;
    q.stream_evidence = cls == BreakerClass::kStream;
    q.side = side;
    q.recorded_producer = producer;
    e.quarantine = std::move(q);
    BreakerEvent ev = Event(FleetEventKind::kEngineHoldStarted, e.settings.iid);
    ev.hold_kind = HoldKind::kTimed;
    ev.cause = cause;
    events.push_back(ev);
  }
  return events;
}

void BreakerBook::RecordSuccess(size_t i, Success kind) {
  EngineBreaker& e = engines_[i];
  auto& s = e.streak;
  auto clear = [&s](BreakerClass c) { s[static_cast<int>(c)] = 0; };
  if (kind != Success::kEngineRejected) e.checked = true;
  switch (kind) {
    case Success::kEngineRejected:
      clear(BreakerClass::kConnection);
      clear(BreakerClass::kInferenceStatus);
      break;
    case Success::kHealth:
      e.health_passed_in_streak = true;
      [[fallthrough]];
    case Success::kLiveness:
      clear(BreakerClass::kLiveness);
      e.liveness_misses = 0;
      break;
    case Success::kPrefillHandoff:
      clear(BreakerClass::kConnection);
      clear(BreakerClass::kTimeout);
      clear(BreakerClass::kOverload);
      clear(BreakerClass::kInferenceStatus);
      clear(BreakerClass::kKvHandoff);
      e.unverified_readmission = false;
      e.health_passed_in_streak = false;
      break;
    case Success::kDecodeDone:
      clear(BreakerClass::kConnection);
      clear(BreakerClass::kTimeout);
      clear(BreakerClass::kOverload);
      clear(BreakerClass::kInferenceStatus);
      clear(BreakerClass::kStream);
      e.unverified_readmission = false;
      e.health_passed_in_streak = false;
      break;
  }
}

std::vector<ProbeTask> BreakerBook::TakeDueProbes(MonoTime now, const std::vector<bool>& idle) {
  std::vector<ProbeTask> tasks;
  const auto liveness_every = engines::FromSeconds(recovery_.liveness_interval_s);
  for (size_t i = 0; i < engines_.size(); ++i) {
    EngineBreaker& e = engines_[i];
    // A drained or operator-ejected engine is the operator's: no probe
    // brings it back, only ReadmitEngine.
    if (e.probe_running || e.draining) continue;
    if (e.ejection && e.ejection->cause == EjectCause::kOperator) continue;
    std::optional<ProbeKind> kind;
    if ((e.hold || e.ejection) && now >= e.next_probe_at) {
      kind = e.hold || (e.ejection && e.ejection->inference_suspect) ? ProbeKind::kInference
                                                                      : ProbeKind::kHealth;
    } else if (e.health_probe_due && !e.ejection) {
      kind = ProbeKind::kHealth;
    } else if (recovery_.liveness_interval_s > 0 && !e.ejection && !e.draining &&
               i < idle.size() && idle[i] && now - e.last_liveness >= liveness_every) {
      // A health 200 cannot end a quarantine started by stream evidence:
      // the sweep of such an engine is an inference verification.
      kind = StreamQuarantined(i, now) ? ProbeKind::kInference : ProbeKind::kLiveness;
      e.last_liveness = now;
    }
    if (kind) {
      e.probe_running = true;
      tasks.push_back(ProbeTask{i, *kind, e.settings.iid, e.incarnation});
    }
  }
  return tasks;
}

Phase BreakerBook::ProbeSide(size_t i) const {
  const EngineBreaker& e = engines_[i];
  if (e.hold) return e.hold->side;
  if (e.ejection) return e.ejection->side;
  if (e.quarantine) return e.quarantine->side;
  return CanDecode(e.settings.role) ? Phase::kDecode : Phase::kPrefill;
}

std::string BreakerBook::RecordedProducer(size_t i) const {
  const EngineBreaker& e = engines_[i];
  if (e.hold) return e.hold->recorded_producer;
  if (e.ejection) return e.ejection->recorded_producer;
  if (e.quarantine) return e.quarantine->recorded_producer;
  return "";
}

MonoTime BreakerBook::NextProbeAfterFailure(EngineBreaker& e, MonoTime now) const {
  e.probe_failures = std::min(e.probe_failures + 1, kMaxProbeBackoff);
  return now + engines::FromSeconds(recovery_.readmit_interval_s * e.probe_failures);
}

std::vector<BreakerEvent> BreakerBook::CompleteProbe(size_t i, ProbeKind kind,
                                                     ProbeOutcome outcome,
                                                     const std::string& detail,
                                                     const std::string& producer, MonoTime now) {
  std::vector<BreakerEvent> events;
  EngineBreaker& e = engines_[i];
  e.probe_running = false;
  if (outcome == ProbeOutcome::kProducerFailed) outcome = ProbeOutcome::kInconclusive;
  e.last_probe = LastProbe{kind, outcome, now, detail};
  BreakerEvent probe = Event(FleetEventKind::kEngineProbe, e.settings.iid);
  probe.probe_kind = kind;
  probe.outcome = outcome;
  probe.producer = producer;
  probe.detail = detail;
  events.push_back(probe);
  auto append = [&events](std::vector<BreakerEvent> more) {
    for (BreakerEvent& ev : more) events.push_back(std::move(ev));
  };
  const auto interval = engines::FromSeconds(recovery_.readmit_interval_s);

  if (kind == ProbeKind::kLiveness) {
    if (outcome == ProbeOutcome::kPassed) {
      RecordSuccess(i, Success::kLiveness);
      if (e.quarantine && now < e.quarantine->until && !e.quarantine->stream_evidence) {
        append(ReleaseQuarantine(i, "health"));
      }
    } else if (outcome == ProbeOutcome::kFailed) {
      ++e.streak[static_cast<int>(BreakerClass::kLiveness)];
      if (++e.liveness_misses >= recovery_.liveness_misses && !e.ejection) {
        append(Eject(i, EjectCause::kLiveness,
                     std::to_string(e.liveness_misses) + " consecutive failed health checks: " +
                         detail,
                     now));
      }
    }
    return events;
  }

  if (e.ejection) {  // a readmission probe
    if (outcome == ProbeOutcome::kPassed) {
      append(Readmit(i,
                     contract_pinned_                  ? "lifecycle"
                     : kind == ProbeKind::kInference ? "verification"
                                                     : "health",
                     now));
    } else if (outcome == ProbeOutcome::kFailed) {
      e.next_probe_at = NextProbeAfterFailure(e, now);
    } else {
      e.next_probe_at = now + interval;
    }
    return events;
  }

  if (kind == ProbeKind::kHealth) {  // asked for by a timeout/overload streak
    e.health_probe_due = false;
    if (outcome == ProbeOutcome::kPassed) {
      RecordSuccess(i, Success::kHealth);
    } else if (outcome == ProbeOutcome::kFailed && !IsLastForARole(i, now)) {
      append(Eject(i, EjectCause::kHealthProbe, detail, now));
    }
    return events;
  }

  // An inference verification of an engine in a stream-evidence quarantine
  // (its liveness sweep): a pass ends the quarantine early; otherwise it
  // runs until it expires.
  if (!e.hold) {
    if (kind == ProbeKind::kInference && outcome == ProbeOutcome::kPassed &&
        StreamQuarantined(i, now)) {
      RecordSuccess(i, Success::kHealth);
      RecordSuccess(i, Success::kDecodeDone);
      append(ReleaseQuarantine(i, "verification"));
    }
    return events;
  }
  // An inference probe of a held engine.
  if (outcome == ProbeOutcome::kPassed) {
    RecordSuccess(i, Success::kDecodeDone);
    RecordSuccess(i, Success::kPrefillHandoff);
    e.probe_failures = 0;
    e.next_probe_at = MonoTime::max();
    e.checked = true;
    const std::string evidence = contract_pinned_ ? "lifecycle" : "verification";
    EndHolds(i, evidence, now, &events);
    BreakerEvent ev = Event(FleetEventKind::kEngineReadmitted, e.settings.iid);
    ev.evidence = evidence;
    events.push_back(ev);
  } else if (outcome == ProbeOutcome::kFailed) {
    if (IsLastForARole(i, now)) {
      // Uncovered: it stays in placement rather than leave a role unserved.
      EndHolds(i, "uncovered", now, &events);
      e.next_probe_at = MonoTime::max();
    } else {
      const bool stream_origin = e.hold->cls == BreakerClass::kStream;
      append(Eject(i, EjectCause::kInferenceProbe, detail, now));  // an inference suspect
      e.ejection->stream_origin = stream_origin;
      e.probe_failures = 1;
      e.next_probe_at = now + interval;
    }
  } else {
    e.next_probe_at = now + interval;
  }
  return events;
}

std::vector<BreakerEvent> BreakerBook::Eject(size_t i, EjectCause cause, const std::string& detail,
                                             MonoTime now) {
  std::vector<BreakerEvent> events;
  EngineBreaker& e = engines_[i];
  if (e.ejection) return events;
  const std::optional<InferenceHold> hold = e.hold;
  EndHolds(i, "ejected", now, &events);
  Ejection ej;
  ej.at = now;
  ej.cause = cause;
  ej.detail = detail;
  ej.side = CanDecode(e.settings.role) ? Phase::kDecode : Phase::kPrefill;
  if (hold) {
    // Ejected while on an inference hold (a failed inference probe, or a
    // connection or liveness ejection meanwhile): still an inference
    // suspect, so it returns only when an inference probe passes.
    ej.inference_suspect = true;
    ej.side = hold->side;
    ej.recorded_producer = hold->recorded_producer;
  } else if (e.unverified_readmission &&
             (cause == EjectCause::kConnection || cause == EjectCause::kLiveness)) {
    // Readmitted on health alone, and failing again before any inference
    // succeeded: its health checks do not speak for its inference legs.
    ej.inference_suspect = true;
  }
  e.ejection = ej;
  e.last_ejection_cause = cause;
  e.last_ejection_detail = detail;
  e.health_probe_due = false;
  e.probe_failures = 0;
  e.next_probe_at = now + engines::FromSeconds(recovery_.readmit_interval_s);
  BreakerEvent ev = Event(FleetEventKind::kEngineEjected, e.settings.iid);
  ev.cause = std::string(EjectCauseName(cause));
  ev.detail = detail;
  events.push_back(ev);
  ReleaseUncovered(now, &events);
  return events;
}

void BreakerBook::ReleaseUncovered(MonoTime now, std::vector<BreakerEvent>* events) {
  for (size_t j = 0; j < engines_.size(); ++j) {
    EngineBreaker& o = engines_[j];
    if (o.ejection || o.draining) continue;
    if (!o.hold && !(o.quarantine && now < o.quarantine->until)) continue;
    if (!IsLastForARole(j, now)) continue;
    EndHolds(j, "uncovered", now, events);
    o.next_probe_at = MonoTime::max();
    o.probe_failures = 0;
  }
}

std::vector<BreakerEvent> BreakerBook::Drain(size_t i, MonoTime now) {
  std::vector<BreakerEvent> events;
  EngineBreaker& e = engines_[i];
  if (e.draining) return events;
  EndHolds(i, "drained", now, &events);
  e.draining = true;
  events.push_back(Event(FleetEventKind::kEngineDrained, e.settings.iid));
  ReleaseUncovered(now, &events);
  return events;
}

std::vector<BreakerEvent> BreakerBook::Readmit(size_t i, const std::string& evidence,
                                               MonoTime now) {
  std::vector<BreakerEvent> events;
  EngineBreaker& e = engines_[i];
  if (!e.ejection && !e.draining && !e.hold && !(e.quarantine && now < e.quarantine->until)) {
    return events;
  }
  EndHolds(i, evidence, now, &events);
  e.ejection.reset();
  e.draining = false;
  e.streak.fill(0);
  e.health_passed_in_streak = false;
  e.probe_failures = 0;
  e.next_probe_at = MonoTime::max();
  e.health_probe_due = false;
  e.liveness_misses = 0;
  e.checked = true;
  e.unverified_readmission = evidence == "health";
  BreakerEvent ev = Event(FleetEventKind::kEngineReadmitted, e.settings.iid);
  ev.evidence = evidence;
  events.push_back(ev);
  return events;
}

std::vector<BreakerEvent> BreakerBook::ExpireQuarantines(MonoTime now) {
  std::vector<BreakerEvent> events;
  for (EngineBreaker& e : engines_) {
    if (e.quarantine && now >= e.quarantine->until) {
      BreakerEvent ev = Event(FleetEventKind::kEngineHoldEnded, e.settings.iid);
      ev.hold_kind = HoldKind::kTimed;
      ev.cause = "expired";
      events.push_back(ev);
      e.quarantine.reset();
    }
  }
  return events;
}

bool BreakerBook::StreamQuarantined(size_t i, MonoTime now) const {
  const EngineBreaker& e = engines_[i];
  return e.quarantine && e.quarantine->stream_evidence && now < e.quarantine->until && !e.hold &&
         !e.ejection && !e.draining;
}

std::vector<BreakerEvent> BreakerBook::ReleaseQuarantine(size_t i, const std::string& cause) {
  std::vector<BreakerEvent> events;
  EngineBreaker& e = engines_[i];
  if (!e.quarantine) return events;
  BreakerEvent ev = Event(FleetEventKind::kEngineHoldEnded, e.settings.iid);
  ev.hold_kind = HoldKind::kTimed;
  ev.cause = cause;
  events.push_back(ev);
  e.quarantine.reset();
  return events;
}

}  // namespace narwhal::router
