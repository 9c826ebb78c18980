// Fleet's membership (SPEC §13, B20-B25): engines join (gated by their join
// checks), leave (draining their legs in flight, cancelled at
// membership.drain_timeout_s) and return (with the breaker state they left
// with, within membership.remember_s).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "router/common/log.h"
#include "router/fleet/fleet.h"

namespace narwhal::router {
namespace {

// Backoff of a failing joiner: readmit_interval_s × failures, at most this
// many intervals.
constexpr int kMaxJoinBackoff = 10;

bool SameIncarnation(const EngineSettings& a, const EngineSettings& b) {
  return a.url == b.url && a.role == b.role && a.kv_engine_id == b.kv_engine_id;
}

const char* kRoles[] = {"prefill", "decode", "both"};

std::string_view RoleLabel(Role role) {
  switch (role) {
    case Role::kPrefill:
      return "prefill";
    case Role::kDecode:
      return "decode";
    case Role::kBoth:
      break;
  }
  return "both";
}

FleetEvent MembershipEvent(FleetEventKind kind, const EngineSettings& e,
                           const MemberSource& source, std::string cause, std::string detail) {
  FleetEvent ev;
  ev.kind = kind;
  ev.iid = e.iid;
  ev.source = source.Name();
  ev.url = e.url;
  ev.cause = std::move(cause);
  ev.detail = std::move(detail);
  return ev;
}

}  // namespace

void Fleet::SetMembershipOptions(const MembershipOptions& options) {
  std::lock_guard<std::mutex> lock(mu_);
  membership_ = options;
}

std::vector<EngineSettings> Fleet::MemberSettingsLocked() const {
  std::vector<EngineSettings> out;
  out.reserve(members_.size());
  for (const Member& m : members_) out.push_back(m.engine->settings());
  return out;
}

size_t Fleet::AddMemberLocked(const EngineSettings& engine, const MemberSource& source,
                              bool joining, std::vector<FleetEvent>* events) {
  const MonoTime now = clock_.Now();
  std::optional<EngineBreaker> restored;
  if (auto it = remembered_.find(engine.iid); it != remembered_.end()) {
    // B21: back with the same iid and url within remember_s.
    if (it->second.url == engine.url && now < it->second.until) {
      restored = std::move(it->second.breaker);
    }
    remembered_.erase(it);
  }
  const uint64_t incarnation = ++next_incarnation_;
  const size_t i = book_.AddEngine(engine, incarnation, std::move(restored));
  const size_t index_chunks =
      settings_->placement.cache_aware() ? static_cast<size_t>(settings_->placement.index_chunks)
                                         : 0;
  Member m;
  m.engine = std::make_shared<EngineRecord>(engine, incarnation, index_chunks);
  m.source = source;
  m.series = EngineSeries::Create(metrics_, engine);
  m.next_scrape = now;
  m.joining = joining;
  m.next_join_check = now;
  m.kv_events = engine.kv_events;
  m.kv_events_replay = engine.kv_events_replay;
  members_.push_back(std::move(m));
  if (events != nullptr && !joining) {
    events->push_back(MembershipEvent(FleetEventKind::kEngineJoined, engine, source,
                                      "join checks off (membership.join_checks false)", ""));
  }
  return i;
}

void Fleet::RemoveMemberLocked(size_t i, const std::string& why,
                               std::vector<BreakerEvent>* breaker,
                               std::vector<FleetEvent>* events) {
  const MonoTime now = clock_.Now();
  Member m = std::move(members_[i]);
  members_.erase(members_.begin() + static_cast<std::ptrdiff_t>(i));
  EngineBreaker state = book_.RemoveEngine(i, now, breaker);
  if (membership_.remember_s > 0) {
    const std::string iid = state.settings.iid;
    const std::string url = state.settings.url;
    remembered_[iid] =
        Remembered{url, std::move(state), now + engines::FromSeconds(membership_.remember_s)};
  }
  const EngineSettings& e = m.engine->settings();
  // Nothing new lands on it (it is in no view from now on); what runs may
  // finish until the drain timeout.
  const MonoTime deadline = now + engines::FromSeconds(membership_.drain_timeout_s);
  leaving_.push_back(Leaving{m.engine, m.source, m.series, now, deadline, false});
  if (events != nullptr) {
    events->push_back(MembershipEvent(FleetEventKind::kEngineLeft, e, m.source, why, ""));
  }
  for (const char* role : {"prefill", "decode"}) {
    const bool prefill = std::string_view(role) == "prefill";
    if (!(prefill ? CanPrefill(e.role) : CanDecode(e.role))) continue;
    // Another engine of the role that can take legs now: a joining, held,
    // ejected or drained one does not count.
    bool other = false;
    for (size_t j = 0; j < members_.size() && !other; ++j) {
      const Role r = members_[j].engine->settings().role;
      other = (prefill ? CanPrefill(r) : CanDecode(r)) && !members_[j].joining &&
              book_.State(j, now) == PlacementState::kServing;
    }
    if (!other) {
      LogWarning("fleet: engine " + e.iid + " was the last engine in placement for the " + role +
                 " role: requests that need it get 503 until one joins or returns");
    }
  }
}

void Fleet::RemoveSeriesIfUnusedLocked(const EngineSettings& engine) {
  if (book_.Find(engine.iid) >= 0) return;
  for (const Leaving& l : leaving_) {
    if (l.engine->iid() == engine.iid) return;
  }
  EngineSeries::Remove(metrics_, engine);
}

void Fleet::CountMembershipChange(const MemberSource& source, const char* change) {
  if (metrics_ == nullptr) return;
  metrics_->membership_changes_total.Add({{"source", source.Name()}, {"change", change}})
      .Increment();
}

void Fleet::PublishMembershipLocked() {
  if (metrics_ == nullptr) return;
  const MonoTime now = clock_.Now();
  std::map<std::pair<std::string, std::string>, int> counts;
  for (const char* role : kRoles) {
    for (const char* state :
         {"serving", "held", "quarantined", "ejected", "draining", "joining"}) {
      counts[{role, state}] = 0;
    }
  }
  for (size_t i = 0; i < members_.size(); ++i) {
    const PlacementState state =
        members_[i].joining ? PlacementState::kJoining : book_.State(i, now);
    ++counts[{std::string(RoleLabel(members_[i].engine->settings().role)),
              std::string(PlacementStateName(state))}];
  }
  for (const Leaving& l : leaving_) {
    ++counts[{std::string(RoleLabel(l.engine->settings().role)), "draining"}];
  }
  for (const auto& [key, n] : counts) {
    metrics_->fleet_engines.Add({{"role", key.first}, {"state", key.second}}).Set(n);
  }
}

absl::Status Fleet::AddEngine(const EngineSettings& engine, const MemberSource& source) {
  Sync();
  std::vector<FleetEvent> events;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (book_.Find(engine.iid) >= 0) {
      return absl::AlreadyExistsError("engine " + engine.iid + " is already in the fleet");
    }
    AddMemberLocked(engine, source, membership_.join_checks, &events);
    links_.SetEngines(MemberSettingsLocked());
    PublishAllLocked();
    PublishMembershipLocked();
    PublishViewLocked();
  }
  LogInfo("fleet: engine " + engine.iid + " (" + engine.url + ", " +
          std::string(RoleLabel(engine.role)) + ", source " + source.Name() + ") " +
          (events.empty() ? "is joining: no client leg until its join checks pass"
                          : "joined (join checks off)"));
  for (const FleetEvent& e : events) {
    CountMembershipChange(source, "joined");
    Publish(e);
  }
  return absl::OkStatus();
}

absl::Status Fleet::RemoveEngine(const std::string& iid, const MemberSource& by) {
  Sync();
  std::vector<BreakerEvent> breaker;
  std::vector<FleetEvent> events;
  MemberSource source;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const int i = book_.Find(iid);
    if (i < 0) return absl::NotFoundError("no engine " + iid);
    source = members_[i].source;
    if (!(source == by)) {
      return absl::FailedPreconditionError(
          "engine " + iid + " comes from " + source.Name() + ": change it there" +
          (source.kind == SourceKind::kFile ? " (the config file) and reload" : ""));
    }
    RemoveMemberLocked(static_cast<size_t>(i), "removed by " + by.Name(), &breaker, &events);
    links_.SetEngines(MemberSettingsLocked());
    PublishAllLocked();
    PublishMembershipLocked();
    PublishViewLocked();
  }
  Emit(breaker);
  for (const FleetEvent& e : events) {
    CountMembershipChange(source, "left");
    Publish(e);
  }
  return absl::OkStatus();
}

MembershipChange Fleet::Reconcile(const MemberSource& source,
                                  const std::vector<EngineSettings>& desired) {
  Sync();
  MembershipChange change;
  std::vector<BreakerEvent> breaker;
  std::vector<FleetEvent> events;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto wanted = [&](const std::string& iid) -> const EngineSettings* {
      for (const EngineSettings& e : desired) {
        if (e.iid == iid) return &e;
      }
      return nullptr;
    };
    // Members of this source that are gone or changed leave.
    std::vector<EngineSettings> rejoin;
    for (size_t i = members_.size(); i-- > 0;) {
      if (!(members_[i].source == source)) continue;
      const EngineSettings current = members_[i].engine->settings();
      const EngineSettings* want = wanted(current.iid);
      if (want != nullptr && SameIncarnation(current, *want)) {
        // Unchanged: it keeps every state; its KV-event endpoints follow
        // the source (the subscriber resubscribes).
        members_[i].kv_events = want->kv_events;
        members_[i].kv_events_replay = want->kv_events_replay;
        continue;
      }
      RemoveMemberLocked(i, want == nullptr ? "gone from " + source.Name()
                                            : "changed in " + source.Name(),
                         &breaker, &events);
      if (want == nullptr) {
        change.left.push_back(current.iid);
      } else {
        change.changed.push_back(current.iid);
        rejoin.push_back(*want);
      }
    }
    // New iids join; changed ones join again as new incarnations.
    for (const EngineSettings& e : desired) {
      const bool changed = std::find_if(rejoin.begin(), rejoin.end(), [&](const EngineSettings& r) {
                             return r.iid == e.iid;
                           }) != rejoin.end();
      const int i = book_.Find(e.iid);
      if (i >= 0 && !changed) {
        if (!(members_[i].source == source)) {
          LogWarning("fleet: " + source.Name() + " names engine " + e.iid + ", which comes from " +
                     members_[i].source.Name() + ": skipped");
        }
        continue;
      }
      AddMemberLocked(e, source, membership_.join_checks, &events);
      if (!changed) change.joined.push_back(e.iid);
    }
    links_.SetEngines(MemberSettingsLocked());
    PublishAllLocked();
    PublishMembershipLocked();
    PublishViewLocked();
  }
  Emit(breaker);
  for (const FleetEvent& e : events) {
    CountMembershipChange(source, e.kind == FleetEventKind::kEngineLeft ? "left" : "joined");
    Publish(e);
  }
  return change;
}

std::vector<KvEndpoint> Fleet::KvEndpoints() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<KvEndpoint> out;
  for (const Member& m : members_) {
    if (!m.kv_events.empty()) {
      out.push_back(KvEndpoint{m.engine->iid(), m.kv_events, m.kv_events_replay});
    }
  }
  return out;
}

std::vector<JoinTask> Fleet::TakeDueJoinChecks() {
  Sync();
  const MonoTime now = clock_.Now();
  std::vector<JoinTask> tasks;
  std::lock_guard<std::mutex> lock(mu_);
  for (Member& m : members_) {
    if (!m.joining || m.join_running || now < m.next_join_check) continue;
    m.join_running = true;
    tasks.push_back(JoinTask{m.engine->target(), m.engine->settings().role, m.engine->id()});
  }
  return tasks;
}

void Fleet::CompleteJoinCheck(const JoinTask& task, bool passed, const std::string& detail) {
  Sync();
  std::optional<FleetEvent> event;
  MemberSource source;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const int i = book_.Find(task.target.iid);
    if (i < 0 || members_[i].engine->id() != task.incarnation) return;  // it left meanwhile
    Member& m = members_[i];
    m.join_running = false;
    source = m.source;
    const EngineSettings& e = m.engine->settings();
    if (passed) {
      m.joining = false;
      m.join_failure.clear();
      book_.RecordSuccess(static_cast<size_t>(i), Success::kLiveness);  // counts for readiness
      event = MembershipEvent(FleetEventKind::kEngineJoined, e, source, "join checks passed",
                              detail);
    } else {
      m.join_failures = std::min(m.join_failures + 1, kMaxJoinBackoff);
      m.join_failure = detail;
      const double next_in_s = settings_->recovery.readmit_interval_s * m.join_failures;
      m.next_join_check = clock_.Now() + engines::FromSeconds(next_in_s);
      // Seconds as given (0.2, 1.5, 30), not truncated to whole ones.
      event = MembershipEvent(FleetEventKind::kEngineJoinFailed, e, source,
                              absl::StrCat("join check failed (", m.join_failures,
                                           " in a row; next in ", next_in_s, " s)"),
                              detail);
    }
    PublishLocked(static_cast<size_t>(i));
    PublishMembershipLocked();
    PublishViewLocked();
  }
  CountMembershipChange(source, passed ? "joined" : "join_failed");
  Publish(*event);
}

std::vector<engines::EngineTarget> Fleet::JoiningPeers(Phase phase,
                                                       const std::string& except) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<engines::EngineTarget> out;
  for (const Member& m : members_) {
    const EngineSettings& e = m.engine->settings();
    if (!m.joining || e.iid == except) continue;
    if (phase == Phase::kPrefill ? CanPrefill(e.role) : CanDecode(e.role)) {
      out.push_back(m.engine->target());
    }
  }
  return out;
}

void Fleet::SweepLeaving() {
  const MonoTime now = clock_.Now();
  std::vector<EngineRef> cancel;
  std::vector<std::string> gone;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = remembered_.begin(); it != remembered_.end();) {
      it = now >= it->second.until ? remembered_.erase(it) : std::next(it);
    }
    for (size_t k = leaving_.size(); k-- > 0;) {
      Leaving& l = leaving_[k];
      if (l.engine->Idle() && l.engine->reserved() == 0) {
        const EngineSettings engine = l.engine->settings();
        gone.push_back(engine.iid + (l.cancelled ? " (its last legs were cancelled)" : ""));
        leaving_.erase(leaving_.begin() + static_cast<std::ptrdiff_t>(k));
        RemoveSeriesIfUnusedLocked(engine);
        continue;
      }
      if (!l.cancelled && now >= l.deadline) {
        l.cancelled = true;
        cancel.push_back(l.engine);
      }
    }
    if (!gone.empty() || !cancel.empty()) PublishMembershipLocked();
  }
  for (const std::string& iid : gone) {
    LogInfo("fleet: engine " + iid + " is gone: no leg runs on it any more");
  }
  for (const EngineRef& e : cancel) {
    LogWarning("fleet: engine " + e->iid() + " left the fleet and its legs in flight outlasted "
               "membership.drain_timeout_s: cancelling " +
               std::to_string(e->inflight(Phase::kPrefill) + e->inflight(Phase::kDecode)) +
               " legs");
    e->removed().Cancel();
  }
}

}  // namespace narwhal::router
