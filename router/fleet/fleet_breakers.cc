// Fleet, the owner's side: breaker evidence, probes, operator actions, the
// engines' snapshots and gauges, and the fleet's events (router/fleet/fleet.h).
#include <algorithm>

#include "router/common/log.h"
#include "router/fleet/fleet.h"

namespace narwhal::router {

void Fleet::RecordFailure(const engines::EngineFailure& failure, const std::string& producer) {
  Sync();
  DoRecordFailure(failure, producer);
}

void Fleet::RecordSuccess(const std::string& iid, Success kind) {
  Sync();
  DoRecordSuccess(iid, kind);
}

bool Fleet::IsMemberLocked(const std::string& iid, uint64_t incarnation) const {
  const int i = book_.Find(iid);
  return i >= 0 && (incarnation == 0 || book_.engine(i).incarnation == incarnation);
}

void Fleet::DoRecordFailure(const engines::EngineFailure& failure, const std::string& producer,
                            uint64_t producer_incarnation, uint64_t consumer_incarnation) {
  if (failure.breaker_class == BreakerClass::kNone) return;
  RecordLinkFailure(failure, producer, producer_incarnation, consumer_incarnation);
  std::vector<BreakerEvent> events;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // A prefill leg's failure and a producer's bad handoff are about the
    // producer, anything else about the consumer.
    const uint64_t incarnation = failure.evidence_iid == producer && !producer.empty()
                                     ? producer_incarnation
                                     : consumer_incarnation;
    if (!IsMemberLocked(failure.evidence_iid, incarnation)) return;
    const int i = book_.Find(failure.evidence_iid);
    const std::string cause = std::string(engines::PhaseName(failure.phase)) + " " +
                              std::string(engines::FailureReasonName(failure.reason)) + ": " +
                              failure.detail;
    // Evidence against a producer raised on the decode leg (B3) is about its
    // prefill side.
    const Phase side = failure.evidence_iid != failure.iid ? Phase::kPrefill : failure.phase;
    events = book_.RecordFailure(i, failure.breaker_class, side,
                                 side == Phase::kDecode ? producer : "", cause, clock_.Now());
    // Other engines' holds may have ended too (no longer covered).
    PublishAllLocked();
    PublishViewLocked();
  }
  Emit(events);
}

void Fleet::DoRecordSuccess(const std::string& iid, Success kind, uint64_t incarnation) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!IsMemberLocked(iid, incarnation)) return;
  const int i = book_.Find(iid);
  if (i < 0) return;
  const bool was_checked = book_.engine(i).checked;
  book_.RecordSuccess(i, kind);
  PublishLocked(i);
  // A success moves only streaks, and a first one makes the engine count
  // for readiness: only that changes the view.
  if (!was_checked && book_.engine(i).checked) PublishViewLocked();
}

std::vector<ProbeTask> Fleet::TakeDueProbes() {
  Sync();
  const MonoTime now = clock_.Now();
  std::vector<ProbeTask> tasks;
  std::vector<BreakerEvent> events;
  {
    std::lock_guard<std::mutex> lock(mu_);
    events = book_.ExpireQuarantines(now);
    std::vector<bool> idle(book_.size());
    for (size_t i = 0; i < book_.size(); ++i) idle[i] = members_[i].engine->Idle();
    tasks = book_.TakeDueProbes(now, idle);
    // Joining engines are the join checks' (B22), not the breaker's.
    tasks.erase(std::remove_if(tasks.begin(), tasks.end(),
                               [&](const ProbeTask& t) {
                                 const bool joining = members_[t.index].joining;
                                 if (joining) book_.ProbeDone(t.index);
                                 return joining;
                               }),
                tasks.end());
    PublishAllLocked();
    PublishViewLocked();
  }
  Emit(events);
  return tasks;
}

void Fleet::CompleteProbe(const ProbeTask& task, ProbeOutcome outcome, const std::string& detail,
                          const std::string& producer) {
  Sync();
  std::vector<BreakerEvent> events;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const int i = book_.Find(task.iid);
    // It left the fleet meanwhile, or this is another incarnation.
    if (i < 0 || book_.engine(i).incarnation != task.incarnation) return;
    const bool wave_hold = !book_.WaveHoldReason().empty();
    events = book_.CompleteProbe(i, task.kind, outcome, detail, producer, clock_.Now());
    // Other engines' gauges move only with an event about them (a hold the
    // outcome ended) or a whole-wave hold starting or ending; otherwise a
    // sweep of every engine would refresh every engine per probe.
    bool others = wave_hold != !book_.WaveHoldReason().empty();
    for (const BreakerEvent& e : events) others = others || e.iid != task.iid;
    if (others) {
      PublishAllLocked();
    } else {
      PublishLocked(i);
    }
    PublishViewLocked();
  }
  Emit(events);
}

void Fleet::RecordProbeAttempt(const ProbeTask& task, ProbeOutcome outcome,
                               const std::string& producer, const std::string& detail) {
  BreakerEvent e;
  e.kind = FleetEventKind::kEngineProbe;
  e.iid = task.iid;
  e.probe_kind = task.kind;
  e.outcome = outcome;
  e.producer = producer;
  e.detail = detail;
  Emit({e});
}

Phase Fleet::ProbeSide(const std::string& iid) const {
  std::lock_guard<std::mutex> lock(mu_);
  const int i = book_.Find(iid);
  return i < 0 ? Phase::kDecode : book_.ProbeSide(i);
}

std::string Fleet::RecordedProducer(const std::string& iid) const {
  std::lock_guard<std::mutex> lock(mu_);
  const int i = book_.Find(iid);
  return i < 0 ? "" : book_.RecordedProducer(i);
}

std::optional<engines::EngineTarget> Fleet::Target(const std::string& iid) const {
  std::lock_guard<std::mutex> lock(mu_);
  const int i = book_.Find(iid);
  if (i < 0) return std::nullopt;
  return members_[i].engine->target();
}

std::vector<engines::EngineTarget> Fleet::LiveProducers(const std::string& except) const {
  return View()->LiveProducers(except, clock_.Now());
}

std::optional<engines::EngineTarget> Fleet::LiveConsumer(const std::string& except) const {
  return View()->LiveConsumer(except, clock_.Now());
}

bool Fleet::Contains(const std::string& iid) const {
  std::lock_guard<std::mutex> lock(mu_);
  return book_.Find(iid) >= 0;
}

std::string Fleet::LastInPlacement(const std::string& iid) const {
  const std::shared_ptr<const PlacementView> view = View();
  const MonoTime now = clock_.Now();
  const ViewEngine* self = view->Find(iid);
  if (self == nullptr) return "";
  for (Phase phase : {Phase::kPrefill, Phase::kDecode}) {
    if (!view->Eligible(*self, phase, now)) continue;
    bool other = false;
    for (const ViewEngine& e : view->engines) {
      other = other || (e.engine->iid() != iid && view->Eligible(e, phase, now));
    }
    if (!other) return std::string(engines::PhaseName(phase));
  }
  return "";
}

std::vector<EngineSettings> Fleet::engines() const {
  std::lock_guard<std::mutex> lock(mu_);
  return MemberSettingsLocked();
}

// An operator action on `iid` under the owner's lock: events emitted after.
template <typename Action>
absl::Status Fleet::Operate(const std::string& iid, Action action) {
  Sync();
  std::vector<BreakerEvent> events;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const int i = book_.Find(iid);
    if (i < 0) return absl::NotFoundError("no engine " + iid);
    absl::Status status = action(static_cast<size_t>(i), &events);
    PublishAllLocked();
    PublishViewLocked();
    if (!status.ok()) return status;
  }
  Emit(events);
  return absl::OkStatus();
}

absl::Status Fleet::Eject(const std::string& iid, const std::string& detail) {
  return Operate(iid, [&](size_t i, std::vector<BreakerEvent>* events) {
    *events = book_.Eject(i, EjectCause::kOperator, detail, clock_.Now());
    return absl::OkStatus();
  });
}

absl::Status Fleet::Drain(const std::string& iid) {
  return Operate(iid, [&](size_t i, std::vector<BreakerEvent>* events) {
    *events = book_.Drain(i, clock_.Now());
    return absl::OkStatus();
  });
}

absl::Status Fleet::Readmit(const std::string& iid, const std::string& evidence) {
  return Operate(iid, [&](size_t i, std::vector<BreakerEvent>* events) {
    *events = book_.Readmit(i, evidence, clock_.Now());
    return absl::OkStatus();
  });
}

absl::Status Fleet::ReleaseQuarantine(const std::string& iid) {
  return Operate(iid, [&](size_t i, std::vector<BreakerEvent>* events) {
    *events = book_.ReleaseQuarantine(i, "operator");
    return events->empty()
               ? absl::FailedPreconditionError("engine " + iid + " is not quarantined")
               : absl::OkStatus();
  });
}

// One log line per fleet state change, with its cause: the event's kind and
// engine, then its fields (router/fleet/fleet_event.h chooses the level).
namespace {
void LogFleetEvent(LogLevel level, const nlohmann::json& event) {
  if (!LogEnabled(level)) return;
  nlohmann::json fields = nlohmann::json::object();
  for (const auto& [key, value] : event.items()) {
    if (key != "event" && key != "iid" && key != "at" && key != "seq") fields[key] = value;
  }
  const std::string kind = event.value("event", "");
  const std::string iid = event.value("iid", "");
  Log(level, "fleet: " + kind + (iid.empty() ? "" : " " + iid), fields);
}
}  // namespace

bool Fleet::Checked(const std::string& iid) const {
  std::lock_guard<std::mutex> lock(mu_);
  const int i = book_.Find(iid);
  return i >= 0 && book_.engine(i).checked;
}

bool Fleet::Ready(std::string* why) const { return View()->Ready(clock_.Now(), why); }

EngineSnapshot Fleet::SnapshotLocked(size_t i, MonoTime now) const {
  const EngineBreaker& e = book_.engine(i);
  EngineSnapshot s;
  s.settings = e.settings;
  s.state = book_.State(i, now);
  s.streak = e.streak;
  const Member& m = members_[i];
  s.source = m.source.Name();
  s.inflight_prefill = m.engine->inflight(Phase::kPrefill);
  s.inflight_decode = m.engine->inflight(Phase::kDecode);
  s.reserved_decode = m.engine->reserved();
  s.prefix_index_chunks = m.engine->IndexSize();
  s.probe_failures = e.probe_failures;
  s.probe_running = e.probe_running;
  s.liveness_misses = e.liveness_misses;
  if (e.hold) {
    s.hold_kind = HoldKind::kInference;
    s.hold_cause = e.hold->cause;
    s.held_for_s = engines::Seconds(now - e.hold->started);
  } else if (e.quarantine && now < e.quarantine->until) {
    s.hold_kind = HoldKind::kTimed;
    s.hold_cause = e.quarantine->cause;
    s.hold_remaining_s = engines::Seconds(e.quarantine->until - now);
    s.held_for_s = engines::Seconds(now - e.quarantine->started);
  }
  if (e.ejection) {
    s.ejection_cause = e.ejection->cause;
    s.ejection_detail = e.ejection->detail;
    s.ejected_for_s = engines::Seconds(now - e.ejection->at);
    s.inference_suspect = e.ejection->inference_suspect;
  }
  s.last_ejection_cause = e.last_ejection_cause;
  if (e.last_probe) {
    s.last_probe_kind = e.last_probe->kind;
    s.last_probe_outcome = e.last_probe->outcome;
    s.last_probe_detail = e.last_probe->detail;
    s.last_probe_age_s = engines::Seconds(now - e.last_probe->at);
  }
  const bool operator_ejected = e.ejection && e.ejection->cause == EjectCause::kOperator;
  if ((e.hold || e.ejection) && !operator_ejected && e.next_probe_at != MonoTime::max()) {
    s.next_probe_in_s = std::max(0.0, engines::Seconds(e.next_probe_at - now));
  }
  if (m.joining) {
    s.state = PlacementState::kJoining;
    s.explanation = "joining: no client leg until its join checks pass" +
                    (m.join_failure.empty()
                         ? std::string()
                         : " (" + std::to_string(m.join_failures) + " failed; last: " +
                               m.join_failure + ")");
    return s;
  }
  switch (s.state) {
    case PlacementState::kServing: {
      const std::string wave = book_.WaveHoldReason();
      if (!wave.empty()) s.explanation = wave;
      break;
    }
    case PlacementState::kDraining:
      s.explanation = "drained by an operator; readmit to return it";
      break;
    case PlacementState::kEjected:
      s.explanation = "ejected (" + std::string(EjectCauseName(e.ejection->cause)) +
                      "): " + s.ejection_detail +
                      (operator_ejected ? "; returns when an operator readmits it"
                       : e.ejection->inference_suspect
                           ? "; returns when an inference probe passes"
                           : "; returns when a health check passes");
      break;
    case PlacementState::kHeld:
      s.explanation = "inference hold: " + s.hold_cause + "; returns when an inference probe passes";
      break;
    case PlacementState::kQuarantined:
      s.explanation = "quarantined after a failed leg (" + s.hold_cause + ")";
      break;
    case PlacementState::kJoining:
    case PlacementState::kLeaving:
      break;
  }
  return s;
}

EngineSnapshot Fleet::LeavingSnapshotLocked(const Leaving& l, MonoTime now) const {
  EngineSnapshot s;
  s.settings = l.engine->settings();
  s.state = PlacementState::kLeaving;
  s.source = l.source.Name();
  s.inflight_prefill = l.engine->inflight(Phase::kPrefill);
  s.inflight_decode = l.engine->inflight(Phase::kDecode);
  s.reserved_decode = l.engine->reserved();
  const int legs = s.inflight_prefill + s.inflight_decode + s.reserved_decode;
  s.explanation = "left the fleet: no new legs; " + std::to_string(legs) + " in flight " +
                  (l.cancelled ? std::string("cancelled at the drain timeout")
                               : "finish, or are cancelled in " +
                                     std::to_string(std::max(
                                         0LL, static_cast<long long>(
                                                  engines::Seconds(l.deadline - now) + 0.999))) +
                                     " s (membership.drain_timeout_s)");
  return s;
}

std::vector<EngineSnapshot> Fleet::Snapshot() const {
  const_cast<Fleet*>(this)->Sync();
  const MonoTime now = clock_.Now();
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<EngineSnapshot> out;
  out.reserve(book_.size() + leaving_.size());
  for (size_t i = 0; i < book_.size(); ++i) out.push_back(SnapshotLocked(i, now));
  for (const Leaving& l : leaving_) out.push_back(LeavingSnapshotLocked(l, now));
  return out;
}

std::optional<EngineSnapshot> Fleet::Snapshot(const std::string& iid) const {
  const_cast<Fleet*>(this)->Sync();
  const MonoTime now = clock_.Now();
  std::lock_guard<std::mutex> lock(mu_);
  const int i = book_.Find(iid);
  if (i >= 0) return SnapshotLocked(static_cast<size_t>(i), now);
  for (const Leaving& l : leaving_) {
    if (l.engine->iid() == iid) return LeavingSnapshotLocked(l, now);
  }
  return std::nullopt;
}

std::map<std::string, EngineEventCounts> Fleet::EventCounts() const {
  const_cast<Fleet*>(this)->Sync();
  return counts_.Engines();
}

void Fleet::PublishAll() {
  Sync();
  std::lock_guard<std::mutex> lock(mu_);
  PublishAllLocked();
  PublishViewLocked();
}

void Fleet::PublishAllLocked() {
  const MonoTime now = clock_.Now();
  const bool wave_hold = !book_.WaveHoldReason().empty();
  for (size_t i = 0; i < book_.size(); ++i) PublishLocked(i, now, wave_hold);
  // Leaving engines keep their in-flight gauges until they are gone.
  for (const Leaving& l : leaving_) {
    if (book_.Find(l.engine->iid()) >= 0) continue;  // a new incarnation's gauges say it
    for (Phase phase : {Phase::kPrefill, Phase::kDecode}) {
      prometheus::Gauge* g = l.series.inflight[phase == Phase::kPrefill ? 0 : 1];
      if (g != nullptr) g->Set(l.engine->inflight(phase));
    }
  }
}

void Fleet::Publish(const FleetEvent& event) {
  counts_.Count(event);
  const LogLevel level = FleetEventLogLevel(event);
  const bool routine = IsRoutineFleetEvent(event);
  if (routine && !LogEnabled(level)) return;
  const double at = clock_.WallNow();
  // The log's and the journal's wire form; the bus keeps the event typed.
  nlohmann::json wire = FleetEventJson(event, at);
  LogFleetEvent(level, wire);
  if (routine) return;  // counted and logged (debug) only
  if (events_ != nullptr) wire["seq"] = events_->Publish(event, at)->seq;
  if (journal_ != nullptr) journal_->Write(std::move(wire));
}

void Fleet::ForgetCaches(const std::vector<BreakerEvent>& events) {
  for (const BreakerEvent& e : events) {
    const bool ejected = e.kind == FleetEventKind::kEngineEjected;
    if (!ejected && e.kind != FleetEventKind::kEngineReadmitted) continue;
    EngineRef engine;
    {
      std::lock_guard<std::mutex> lock(mu_);
      const int i = book_.Find(e.iid);
      if (i < 0) continue;
      engine = members_[i].engine;
    }
    const size_t forgotten = engine->ClearIndex();
    if (forgotten > 0) {
      LogInfo("engine " + e.iid + ": prefix index cleared (" + std::to_string(forgotten) +
              " entries; " + (ejected ? "ejected" : "readmitted") + ", its cache is gone)");
    }
  }
}

void Fleet::Emit(const std::vector<BreakerEvent>& events) {
  ForgetCaches(events);
  for (const BreakerEvent& e : events) Publish(FromBreakerEvent(e));
}

namespace {
// Reading a gauge is a plain load; setting it is an atomic exchange. A
// fleet-wide refresh mostly finds the values unchanged.
void SetGauge(prometheus::Gauge* g, double value) {
  if (g->Value() != value) g->Set(value);
}
}  // namespace

void Fleet::PublishLocked(size_t i) {
  if (metrics_ == nullptr) return;
  PublishLocked(i, clock_.Now(), !book_.WaveHoldReason().empty());
}

void Fleet::PublishLocked(size_t i, MonoTime now, bool wave_hold) {
  if (metrics_ == nullptr) return;
  const EngineBreaker& e = book_.engine(i);
  const Member& m = members_[i];
  const EngineSeries& g = m.series;
  for (int c = 1; c < engines::kBreakerClassCount; ++c) SetGauge(g.streak[c], e.streak[c]);
  const PlacementState state = m.joining ? PlacementState::kJoining : book_.State(i, now);
  SetGauge(g.quarantined, state == PlacementState::kQuarantined ? 1 : 0);
  SetGauge(g.held_timed, state == PlacementState::kQuarantined ? 1 : 0);
  SetGauge(g.held_inference, state == PlacementState::kHeld ? 1 : 0);
  SetGauge(g.in_placement, state == PlacementState::kServing && !wave_hold ? 1 : 0);
  for (Phase phase : {Phase::kPrefill, Phase::kDecode}) {
    prometheus::Gauge* inflight = g.inflight[phase == Phase::kPrefill ? 0 : 1];
    if (inflight != nullptr) SetGauge(inflight, m.engine->inflight(phase));
  }
}

}  // namespace narwhal::router
