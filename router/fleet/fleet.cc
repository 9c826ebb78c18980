#include "router/fleet/fleet.h"

#include <algorithm>

#include "router/common/log.h"
#include "router/fleet/placement.h"

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
    reserved_ = other.reserved_;
    reason_ = other.reason_;
    target_ = std::move(other.target_);
    other.fleet_ = nullptr;
  }
  return *this;
}

void Fleet::Reservation::Release() {
  if (fleet_ == nullptr) return;
  fleet_->ReleaseSlot(index_, phase_, reserved_);
  fleet_ = nullptr;
}

Fleet::Fleet(const Settings& settings, const Clock& clock, Metrics* metrics, Journal* journal,
             EventBus* events)
    : settings_(settings),
      clock_(clock),
      metrics_(metrics),
      journal_(journal),
      events_(events),
      counts_(metrics),
      book_(settings.engines, settings.recovery, settings.engine_contract.has_value()),
      links_(settings.engines, settings.links, settings.recovery.readmit_interval_s, clock.Now()),
      gauges_(settings.engines.size()),
      inflight_(settings.engines.size(), {0, 0}),
      reserved_(settings.engines.size(), 0) {
  indexes_.reserve(settings.engines.size());
  for (const EngineSettings& e : settings.engines) {
    const bool indexed = settings.placement.cache_aware() && CanPrefill(e.role);
    indexes_.emplace_back(indexed ? static_cast<size_t>(settings.placement.index_chunks) : 0);
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < book_.size(); ++i) {
    if (metrics_ != nullptr) {
      const std::string& iid = book_.engine(i).settings.iid;
      EngineGauges& g = gauges_[i];
      // Series only for the phases the engine's role runs.
      const Role role = book_.engine(i).settings.role;
      if (CanPrefill(role)) {
        g.inflight[0] = &metrics_->engine_inflight.Add({{"iid", iid}, {"phase", "prefill"}});
      }
      if (CanDecode(role)) {
        g.inflight[1] = &metrics_->engine_inflight.Add({{"iid", iid}, {"phase", "decode"}});
      }
      // Every counter's label combination at zero from the start, so that
      // increase() sees the first ejection, probe or readmission.
      for (EjectCause cause : kEjectCauses) {
        metrics_->engine_ejections_total.Add(
            {{"iid", iid}, {"cause", std::string(EjectCauseName(cause))}});
      }
      for (ProbeKind kind : kProbeKinds) {
        for (ProbeOutcome outcome : kProbeOutcomes) {
          metrics_->engine_probes_total.Add({{"iid", iid},
                                             {"kind", std::string(ProbeKindName(kind))},
                                             {"outcome", std::string(ProbeOutcomeName(outcome))}});
        }
      }
      for (std::string_view evidence : kReadmissionEvidence) {
        metrics_->engine_readmissions_total.Add({{"iid", iid}, {"evidence", std::string(evidence)}});
      }
      for (int c = 1; c < engines::kBreakerClassCount; ++c) {
        const std::string name(engines::BreakerClassName(static_cast<BreakerClass>(c)));
        g.streak[c] = &metrics_->engine_breaker_streak.Add({{"iid", iid}, {"class", name}});
      }
      g.quarantined = &metrics_->engine_quarantined.Add({{"iid", iid}});
      g.in_placement = &metrics_->engine_in_placement.Add({{"iid", iid}});
      g.held_timed = &metrics_->engine_held.Add({{"iid", iid}, {"kind", "timed"}});
      g.held_inference = &metrics_->engine_held.Add({{"iid", iid}, {"kind", "inference"}});
    }
    PublishLocked(i);
  }
  InitLinkGauges();
  InitRecompute();
}

std::vector<Candidate> Fleet::CandidatesLocked(Phase phase,
                                               const std::vector<std::string>& excluded,
                                               const std::string& avoid, MonoTime now) const {
  const bool prefill = phase == Phase::kPrefill;
  std::vector<Candidate> candidates;
  candidates.reserve(book_.size());
  for (size_t i = 0; i < book_.size(); ++i) {
    const std::string& iid = book_.engine(i).settings.iid;
    if (!book_.Eligible(i, prefill, now)) continue;
    if (std::find(excluded.begin(), excluded.end(), iid) != excluded.end()) continue;
    // Decode load: legs in flight plus legs reserved while their prefill runs.
    const int load = prefill ? inflight_[i][0] : inflight_[i][1] + reserved_[i];
    // Decode: a consumer whose link from the producer (`avoid`) is held is a
    // last resort too.
    const bool last_resort =
        !avoid.empty() && (iid == avoid || (!prefill && links_.Held(avoid, iid)));
    candidates.push_back(Candidate{i, load, last_resort});
  }
  return candidates;
}

void Fleet::CountDecision(Phase phase, PlacementReason reason) {
  if (metrics_ != nullptr) metrics_->placement.CountDecision(phase, reason);
}

std::optional<Fleet::Reservation> Fleet::PickAndReserve(Phase phase,
                                                        const std::vector<std::string>& excluded,
                                                        const std::string& avoid,
                                                        const PromptKey* key,
                                                        PlacementInfo* info) {
  const MonoTime now = clock_.Now();
  PlacementInfo placed;
  Reservation r;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<Candidate> candidates = CandidatesLocked(phase, excluded, avoid, now);
    const bool cache_aware =
        phase == Phase::kPrefill && key != nullptr && settings_.placement.cache_aware();
    std::optional<Choice> choice;
    if (cache_aware) {
      for (Candidate& c : candidates) {
        c.match = indexes_[c.index].Match(*key);
        c.indexed = indexes_[c.index].size();
      }
      choice = ChooseCacheAware(candidates, rotation_[PhaseIndex(phase)]++,
                                ImbalanceLimit{settings_.placement.imbalance_abs,
                                               settings_.placement.imbalance_rel});
    } else if (std::optional<size_t> pos =
                   ChooseLeastLoaded(candidates, rotation_[PhaseIndex(phase)]++)) {
      choice = Choice{*pos, candidates[*pos].avoid ? PlacementReason::kSameWorker
                                                   : PlacementReason::kLeastLoaded};
    }
    if (!choice) return std::nullopt;
    const Candidate& chosen = candidates[choice->pos];
    const size_t index = chosen.index;
    placed.reason = choice->reason;
    if (cache_aware) {
      placed.match_bytes = std::min(chosen.match * PrefixIndex::kChunkBytes, key->text_bytes);
      placed.prompt_bytes = key->text_bytes;
      // Indexed when placed, so the prompts that follow it find it at once.
      indexes_[index].Insert(*key);
    }
    ++inflight_[index][PhaseIndex(phase)];
    PublishLocked(index);
    r.fleet_ = this;
    r.index_ = index;
    r.phase_ = phase;
    r.reason_ = placed.reason;
    r.target_ = Target(index);
  }
  CountDecision(phase, placed.reason);
  if (metrics_ != nullptr && placed.prompt_bytes > 0) {
    metrics_->placement.ObserveMatchFraction(static_cast<double>(placed.match_bytes) /
                                             static_cast<double>(placed.prompt_bytes));
  }
  if (info != nullptr) *info = placed;
  return r;
}

std::optional<Fleet::Reservation> Fleet::ReserveDecode(const std::vector<std::string>& excluded,
                                                       const std::string& avoid,
                                                       PlacementInfo* info) {
  const MonoTime now = clock_.Now();
  std::lock_guard<std::mutex> lock(mu_);
  const std::vector<Candidate> candidates = CandidatesLocked(Phase::kDecode, excluded, avoid, now);
  const std::optional<size_t> pos = ChooseLeastLoaded(candidates, rotation_[1]++);
  if (!pos) return std::nullopt;
  const size_t index = candidates[*pos].index;
  ++reserved_[index];
  Reservation r;
  r.fleet_ = this;
  r.index_ = index;
  r.phase_ = Phase::kDecode;
  r.reserved_ = true;
  r.reason_ =
      candidates[*pos].avoid ? PlacementReason::kSameWorker : PlacementReason::kLeastLoaded;
  r.target_ = Target(index);
  if (info != nullptr) *info = PlacementInfo{r.reason_, 0, 0};
  return r;
}

bool Fleet::Activate(Reservation& reservation, const std::vector<std::string>& excluded) {
  if (!reservation || !reservation.reserved_) return static_cast<bool>(reservation);
  const MonoTime now = clock_.Now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    const size_t i = reservation.index_;
    const std::string& iid = book_.engine(i).settings.iid;
    const bool placeable = book_.Eligible(i, false, now) &&
                           std::find(excluded.begin(), excluded.end(), iid) == excluded.end();
    if (placeable) {
      --reserved_[i];
      ++inflight_[i][1];
      reservation.reserved_ = false;
      PublishLocked(i);
    }
  }
  if (reservation.reserved_) {
    reservation.Release();
    return false;
  }
  CountDecision(Phase::kDecode, reservation.reason_);
  return true;
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

void Fleet::ReleaseSlot(size_t index, Phase phase, bool reserved) {
  std::lock_guard<std::mutex> lock(mu_);
  if (reserved) {
    --reserved_[index];
    return;
  }
  --inflight_[index][PhaseIndex(phase)];
  PublishLocked(index);
}

void Fleet::RecordFailure(const engines::EngineFailure& failure, const std::string& producer) {
  if (failure.breaker_class == BreakerClass::kNone) return;
  RecordLinkFailure(failure, producer);
  std::vector<BreakerEvent> events;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const int i = book_.Find(failure.evidence_iid);
    if (i < 0) return;
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
  }
  Emit(events);
}

void Fleet::RecordSuccess(const std::string& iid, Success kind) {
  std::lock_guard<std::mutex> lock(mu_);
  const int i = book_.Find(iid);
  if (i < 0) return;
  book_.RecordSuccess(i, kind);
  PublishLocked(i);
}

std::vector<ProbeTask> Fleet::TakeDueProbes() {
  const MonoTime now = clock_.Now();
  std::vector<ProbeTask> tasks;
  std::vector<BreakerEvent> events;
  {
    std::lock_guard<std::mutex> lock(mu_);
    events = book_.ExpireQuarantines(now);
    std::vector<bool> idle(book_.size());
    for (size_t i = 0; i < book_.size(); ++i) {
      idle[i] = inflight_[i][0] == 0 && inflight_[i][1] == 0;
    }
    tasks = book_.TakeDueProbes(now, idle);
    PublishAllLocked();
  }
  Emit(events);
  return tasks;
}

void Fleet::CompleteProbe(const ProbeTask& task, ProbeOutcome outcome, const std::string& detail,
                          const std::string& producer) {
  std::vector<BreakerEvent> events;
  {
    std::lock_guard<std::mutex> lock(mu_);
    events = book_.CompleteProbe(task.index, task.kind, outcome, detail, producer, clock_.Now());
    PublishAllLocked();
  }
  Emit(events);
}

void Fleet::RecordProbeAttempt(const ProbeTask& task, ProbeOutcome outcome,
                               const std::string& producer, const std::string& detail) {
  BreakerEvent e;
  e.kind = FleetEventKind::kEngineProbe;
  e.iid = Target(task.index).iid;
  e.probe_kind = task.kind;
  e.outcome = outcome;
  e.producer = producer;
  e.detail = detail;
  Emit({e});
}

Phase Fleet::ProbeSide(size_t index) const {
  std::lock_guard<std::mutex> lock(mu_);
  return book_.ProbeSide(index);
}

std::string Fleet::RecordedProducer(size_t index) const {
  std::lock_guard<std::mutex> lock(mu_);
  return book_.RecordedProducer(index);
}

engines::EngineTarget Fleet::Target(size_t index) const {
  const EngineSettings& e = settings_.engines[index];
  return engines::EngineTarget{e.iid, e.url, e.kv_engine_id};
}

std::vector<engines::EngineTarget> Fleet::LiveProducers(const std::string& except) const {
  const MonoTime now = clock_.Now();
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<size_t> live;
  for (size_t i = 0; i < book_.size(); ++i) {
    if (book_.engine(i).settings.iid != except && book_.Serves(i, true, now)) live.push_back(i);
  }
  std::sort(live.begin(), live.end(), [&](size_t a, size_t b) {
    if (inflight_[a][0] != inflight_[b][0]) return inflight_[a][0] < inflight_[b][0];
    return book_.engine(a).settings.iid < book_.engine(b).settings.iid;
  });
  std::vector<engines::EngineTarget> out;
  for (size_t i : live) out.push_back(Target(i));
  return out;
}

std::optional<engines::EngineTarget> Fleet::LiveConsumer(const std::string& except) const {
  const MonoTime now = clock_.Now();
  std::lock_guard<std::mutex> lock(mu_);
  std::optional<size_t> best;
  for (size_t i = 0; i < book_.size(); ++i) {
    if (book_.engine(i).settings.iid == except || !book_.Serves(i, false, now)) continue;
    if (!best || inflight_[i][1] < inflight_[*best][1]) best = i;
  }
  if (!best) return std::nullopt;
  return Target(*best);
}

int Fleet::Find(const std::string& iid) const {
  std::lock_guard<std::mutex> lock(mu_);
  return book_.Find(iid);
}

absl::Status Fleet::Eject(const std::string& iid, const std::string& detail) {
  std::vector<BreakerEvent> events;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const int i = book_.Find(iid);
    if (i < 0) return absl::NotFoundError("no engine " + iid);
    events = book_.Eject(i, EjectCause::kOperator, detail, clock_.Now());
    PublishAllLocked();
  }
  Emit(events);
  return absl::OkStatus();
}

absl::Status Fleet::Drain(const std::string& iid) {
  std::vector<BreakerEvent> events;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const int i = book_.Find(iid);
    if (i < 0) return absl::NotFoundError("no engine " + iid);
    events = book_.Drain(i, clock_.Now());
    PublishAllLocked();
  }
  Emit(events);
  return absl::OkStatus();
}

absl::Status Fleet::Readmit(const std::string& iid, const std::string& evidence) {
  std::vector<BreakerEvent> events;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const int i = book_.Find(iid);
    if (i < 0) return absl::NotFoundError("no engine " + iid);
    events = book_.Readmit(i, evidence, clock_.Now());
    PublishAllLocked();
  }
  Emit(events);
  return absl::OkStatus();
}

absl::Status Fleet::ReleaseQuarantine(const std::string& iid) {
  std::vector<BreakerEvent> events;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const int i = book_.Find(iid);
    if (i < 0) return absl::NotFoundError("no engine " + iid);
    events = book_.ReleaseQuarantine(i, "operator");
    PublishAllLocked();
    if (events.empty()) {
      return absl::FailedPreconditionError("engine " + iid + " is not quarantined");
    }
  }
  Emit(events);
  return absl::OkStatus();
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

bool Fleet::Checked(size_t index) const {
  std::lock_guard<std::mutex> lock(mu_);
  return index < book_.size() && book_.engine(index).checked;
}

bool Fleet::Ready(std::string* why) const {
  const MonoTime now = clock_.Now();
  std::lock_guard<std::mutex> lock(mu_);
  if (std::string wave = book_.WaveHoldReason(); !wave.empty()) {
    if (why != nullptr) *why = wave;
    return false;
  }
  const bool prefill = book_.EligibleCount(true, now) > 0;
  const bool decode = book_.EligibleCount(false, now) > 0;
  const bool prefill_checked = book_.CheckedEligibleCount(true, now) > 0;
  const bool decode_checked = book_.CheckedEligibleCount(false, now) > 0;
  if (prefill_checked && decode_checked) return true;
  if (prefill && decode) {
    if (why != nullptr) {
      *why = std::string("no engine of the ") +
             (!prefill_checked && !decode_checked ? "prefill and decode roles"
              : !prefill_checked                  ? "prefill role"
                                                  : "decode role") +
             " has passed a health check yet";
    }
    return false;
  }
  if (why != nullptr) {
    *why = std::string("no engine in placement for the ") +
           (!prefill && !decode ? "prefill and decode roles"
            : !prefill         ? "prefill role"
                               : "decode role");
  }
  return false;
}

EngineSnapshot Fleet::SnapshotLocked(size_t i, MonoTime now) const {
  const EngineBreaker& e = book_.engine(i);
  EngineSnapshot s;
  s.settings = e.settings;
  s.state = book_.State(i, now);
  s.streak = e.streak;
  s.inflight_prefill = inflight_[i][0];
  s.inflight_decode = inflight_[i][1];
  s.reserved_decode = reserved_[i];
  s.prefix_index_chunks = indexes_[i].size();
  s.probe_failures = e.probe_failures;
  s.probe_running = e.probe_running;
  s.liveness_misses = e.liveness_misses;
  if (e.hold) {
    s.hold_kind = "inference";
    s.hold_cause = e.hold->cause;
    s.held_for_s = engines::Seconds(now - e.hold->started);
  } else if (e.quarantine && now < e.quarantine->until) {
    s.hold_kind = "timed";
    s.hold_cause = e.quarantine->cause;
    s.hold_remaining_s = engines::Seconds(e.quarantine->until - now);
    s.held_for_s = engines::Seconds(now - e.quarantine->started);
  }
  if (e.ejection) {
    s.ejection_cause = std::string(EjectCauseName(e.ejection->cause));
    s.ejection_detail = e.ejection->detail;
    s.ejected_for_s = engines::Seconds(now - e.ejection->at);
    s.inference_suspect = e.ejection->inference_suspect;
  }
  if (e.last_ejection_cause) s.last_ejection_cause = std::string(EjectCauseName(*e.last_ejection_cause));
  if (e.last_probe) {
    s.last_probe_kind = std::string(ProbeKindName(e.last_probe->kind));
    s.last_probe_outcome = std::string(ProbeOutcomeName(e.last_probe->outcome));
    s.last_probe_detail = e.last_probe->detail;
    s.last_probe_age_s = engines::Seconds(now - e.last_probe->at);
  }
  const bool operator_ejected = e.ejection && e.ejection->cause == EjectCause::kOperator;
  if ((e.hold || e.ejection) && !operator_ejected && e.next_probe_at != MonoTime::max()) {
    s.next_probe_in_s = std::max(0.0, engines::Seconds(e.next_probe_at - now));
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
      s.explanation = "ejected (" + s.ejection_cause + "): " + s.ejection_detail +
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
  }
  return s;
}

std::vector<EngineSnapshot> Fleet::Snapshot() const {
  const MonoTime now = clock_.Now();
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<EngineSnapshot> out;
  out.reserve(book_.size());
  for (size_t i = 0; i < book_.size(); ++i) out.push_back(SnapshotLocked(i, now));
  return out;
}

void Fleet::PublishAll() {
  std::lock_guard<std::mutex> lock(mu_);
  PublishAllLocked();
}

void Fleet::PublishAllLocked() {
  for (size_t i = 0; i < book_.size(); ++i) PublishLocked(i);
}

void Fleet::Publish(const FleetEvent& event) {
  counts_.Count(event);
  nlohmann::json wire = FleetEventJson(event, clock_.WallNow());
  LogFleetEvent(FleetEventLogLevel(event), wire);
  if (events_ != nullptr) wire = events_->Publish(std::move(wire));
  if (journal_ != nullptr) journal_->Write(std::move(wire));
}

void Fleet::PublishEvent(nlohmann::json event) {
  LogFleetEvent(LogLevel::kInfo, event);
  if (!event.contains("at")) event["at"] = clock_.WallNow();
  if (events_ != nullptr) event = events_->Publish(std::move(event));
  if (journal_ != nullptr) journal_->Write(std::move(event));
}

void Fleet::ForgetCaches(const std::vector<BreakerEvent>& events) {
  for (const BreakerEvent& e : events) {
    const bool ejected = e.kind == FleetEventKind::kEngineEjected;
    if (!ejected && e.kind != FleetEventKind::kEngineReadmitted) continue;
    size_t forgotten = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      const int i = book_.Find(e.iid);
      if (i < 0) continue;
      forgotten = indexes_[i].size();
      indexes_[i].Clear();
    }
    if (forgotten > 0) {
      LogInfo("engine " + e.iid + ": prefix index cleared (" + std::to_string(forgotten) +
              " entries; " + (ejected ? "ejected" : "readmitted") +
              ", its cache is gone)");
    }
  }
}

void Fleet::Emit(const std::vector<BreakerEvent>& events) {
  ForgetCaches(events);
  for (const BreakerEvent& e : events) Publish(FromBreakerEvent(e));
}

void Fleet::PublishLocked(size_t i) {
  if (metrics_ == nullptr) return;
  const EngineBreaker& e = book_.engine(i);
  const EngineGauges& g = gauges_[i];
  for (int phase = 0; phase < 2; ++phase) {
    if (g.inflight[phase] != nullptr) g.inflight[phase]->Set(inflight_[i][phase]);
  }
  for (int c = 1; c < engines::kBreakerClassCount; ++c) g.streak[c]->Set(e.streak[c]);
  const PlacementState state = book_.State(i, clock_.Now());
  g.quarantined->Set(state == PlacementState::kQuarantined ? 1 : 0);
  g.held_timed->Set(state == PlacementState::kQuarantined ? 1 : 0);
  g.held_inference->Set(state == PlacementState::kHeld ? 1 : 0);
  g.in_placement->Set(state == PlacementState::kServing && book_.WaveHoldReason().empty() ? 1 : 0);
}

}  // namespace narwhal::router
