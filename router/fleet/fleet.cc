#include "router/fleet/fleet.h"

#include <algorithm>
#include <boost/asio/post.hpp>
#include <utility>

#include "router/common/log.h"
#include "router/fleet/placement.h"

namespace narwhal::router {
namespace {

int RotationIndex(Phase p) { return p == Phase::kPrefill ? 0 : 1; }

}  // namespace

// A report queued by a request.
struct Fleet::QueuedReport {
  bool decode_started = false;  // else `attempt`
  std::string producer;
  std::string consumer;
  AttemptReport attempt;
};

Fleet::Reservation& Fleet::Reservation::operator=(Reservation&& other) noexcept {
  if (this != &other) {
    Release();
    engine_ = std::move(other.engine_);
    phase_ = other.phase_;
    reserved_ = other.reserved_;
    reason_ = other.reason_;
    other.engine_.reset();
  }
  return *this;
}

void Fleet::Reservation::Release() {
  if (engine_ == nullptr) return;
  if (reserved_) {
    engine_->AddReserved(-1);
  } else {
    engine_->AddInflight(phase_, -1);
  }
  engine_.reset();
}

std::string MemberSource::Name() const {
  switch (kind) {
    case SourceKind::kFile:
      return "file";
    case SourceKind::kDns:
      return "dns:" + group;
    case SourceKind::kAdmin:
      return "admin";
  }
  return "file";
}

Fleet::Fleet(const Settings& settings, const Clock& clock, Metrics* metrics, Journal* journal,
             EventBus* events)
    : settings_(std::make_shared<const Settings>(settings)),
      clock_(clock),
      metrics_(metrics),
      journal_(journal),
      events_(events),
      counts_(metrics),
      book_({}, settings.recovery, settings.engine_contract.has_value()),
      links_(settings.engines, settings.links, settings.recovery.readmit_interval_s) {
  membership_.join_checks = settings.membership.join_checks;
  membership_.drain_timeout_s = settings.membership.drain_timeout_s;
  membership_.remember_s = settings.membership.remember_s;
  if (settings.engine_contract && settings.engine_contract->max_model_len) {
    pinned_max_model_len_ = *settings.engine_contract->max_model_len;
  }
  std::lock_guard<std::mutex> lock(mu_);
  // The fleet of the start-up config: in placement at once, each engine
  // counting towards readiness once it passed a check.
  for (const EngineSettings& e : settings.engines) {
    if (e.is_dns_group()) continue;  // its members come from DnsGroups
    AddMemberLocked(e, MemberSource{SourceKind::kFile, ""}, /*joining=*/false, nullptr);
  }
  links_.SetEngines(MemberSettingsLocked());
  PublishAllLocked();
  PublishMembershipLocked();
  PublishViewLocked();
}

Fleet::~Fleet() {
  // A posted apply task must not outlive the fleet: it checks the guard.
  if (apply_guard_ != nullptr) {
    std::lock_guard<std::mutex> lock(apply_guard_->mu);
    apply_guard_->fleet = nullptr;
  }
  QueuedReport* r = nullptr;
  while (reports_.pop(r)) delete r;
}

void Fleet::SetOwnerExecutor(engines::Executor executor) {
  owner_executor_ = std::move(executor);
  apply_guard_ = std::make_shared<ApplyGuard>();
  apply_guard_->fleet = this;
}

// ------------------------------------------------------------ the view

std::shared_ptr<const PlacementView> Fleet::View() const { return view_.Get(); }

std::shared_ptr<const Settings> Fleet::settings() const {
  std::lock_guard<std::mutex> lock(mu_);
  return settings_;
}

void Fleet::ApplySettings(std::shared_ptr<const Settings> settings) {
  Sync();
  std::lock_guard<std::mutex> lock(mu_);
  settings_ = std::move(settings);
  book_.SetRecovery(settings_->recovery, settings_->engine_contract.has_value());
  links_.SetSettings(settings_->links, settings_->recovery.readmit_interval_s);
  membership_.join_checks = settings_->membership.join_checks;
  membership_.drain_timeout_s = settings_->membership.drain_timeout_s;
  membership_.remember_s = settings_->membership.remember_s;
  pinned_max_model_len_ = settings_->engine_contract && settings_->engine_contract->max_model_len
                              ? *settings_->engine_contract->max_model_len
                              : 0;
  PublishAllLocked();
  PublishViewLocked();
}

void Fleet::PublishViewLocked() {
  const MonoTime now = clock_.Now();
  const auto serving_from = [&](size_t i) {
    switch (members_[i].joining ? PlacementState::kJoining : book_.State(i, now)) {
      case PlacementState::kServing:
        return MonoTime::min();
      case PlacementState::kQuarantined:
        return book_.engine(i).quarantine->until;
      default:
        return MonoTime::max();
    }
  };
  std::string wave_hold = book_.WaveHoldReason();
  std::vector<std::pair<std::string, std::string>> held_links;
  for (size_t k = 0; k < links_.size(); ++k) {
    const Link& l = links_.link(k);
    if (l.state == LinkState::kHeld) held_links.emplace_back(l.producer_iid, l.consumer_iid);
  }
  std::sort(held_links.begin(), held_links.end());
  // Unchanged placement needs no new view (compared in place: the monitor
  // and every probe ask, and a view costs a copy per engine).
  const std::shared_ptr<const PlacementView> current = view_.Get();
  bool same = current->version > 0 && current->wave_hold == wave_hold &&
              current->held_links == held_links && current->placement == settings_->placement &&
              current->engines.size() == members_.size();
  for (size_t i = 0; same && i < members_.size(); ++i) {
    const ViewEngine& e = current->engines[i];
    same = e.engine == members_[i].engine && e.serving_from == serving_from(i) &&
           e.checked == book_.engine(i).checked;
  }
  if (same) return;
  auto view = std::make_shared<PlacementView>();
  view->engines.reserve(members_.size());
  for (size_t i = 0; i < members_.size(); ++i) {
    ViewEngine e;
    e.engine = members_[i].engine;
    e.serving_from = serving_from(i);
    e.checked = book_.engine(i).checked;
    view->engines.push_back(std::move(e));
  }
  view->wave_hold = std::move(wave_hold);
  view->placement = settings_->placement;
  view->held_links = std::move(held_links);
  view->version = current->version + 1;
  view_.Publish(std::move(view));
}

// ------------------------------------------------------------ placement

std::vector<Candidate> Fleet::Candidates(const PlacementView& view, Phase phase,
                                         const std::vector<std::string>& excluded,
                                         const std::string& avoid, MonoTime now) const {
  const bool prefill = phase == Phase::kPrefill;
  std::vector<Candidate> candidates;
  candidates.reserve(view.engines.size());
  for (size_t i = 0; i < view.engines.size(); ++i) {
    const ViewEngine& e = view.engines[i];
    const std::string& iid = e.engine->iid();
    if (!view.Eligible(e, phase, now)) continue;
    if (std::find(excluded.begin(), excluded.end(), iid) != excluded.end()) continue;
    // Decode load: legs in flight plus legs reserved while their prefill runs.
    const int load = prefill ? e.engine->inflight(Phase::kPrefill)
                             : e.engine->inflight(Phase::kDecode) + e.engine->reserved();
    // Decode: a consumer whose link from the producer (`avoid`) is held is a
    // last resort too.
    const bool last_resort =
        !avoid.empty() && (iid == avoid || (!prefill && view.LinkHeld(avoid, iid)));
    candidates.push_back(Candidate{i, load, last_resort});
  }
  return candidates;
}

void Fleet::CountDecision(Phase phase, PlacementReason reason) {
  if (metrics_ != nullptr) metrics_->placement.CountDecision(phase, reason);
}

namespace {
ImbalanceLimit LimitOf(const PlacementSettings& p) {
  return ImbalanceLimit{p.imbalance_abs, p.imbalance_rel};
}
}  // namespace

// The prompt tokens a candidate's matched leading blocks cover.
size_t Fleet::MatchedTokens(const Candidate& c, const PlacementPrompt& prompt) {
  return std::min(c.match * static_cast<size_t>(prompt.block_size), prompt.tokens.size());
}

// Each candidate's leading blocks of `tokens` in its KV-event index.
void Fleet::MatchKvBlocks(const KvBlockLookup& lookup, const PlacementView& view,
                          std::span<const uint32_t> tokens, std::vector<Candidate>& candidates) {
  for (Candidate& c : candidates) {
    c.match = lookup.LeadingBlocks(view.engines[c.index].engine->iid(), tokens);
    c.indexed = 0;
  }
}

std::optional<Fleet::Reservation> Fleet::PickAndReserve(Phase phase,
                                                        const std::vector<std::string>& excluded,
                                                        const std::string& avoid,
                                                        const PlacementPrompt& prompt,
                                                        PlacementInfo* info) {
  const MonoTime now = clock_.Now();
  const std::shared_ptr<const PlacementView> view = View();
  std::vector<Candidate> candidates = Candidates(*view, phase, excluded, avoid, now);
  const bool prefill = phase == Phase::kPrefill;
  const bool cache_aware = prefill && prompt.text != nullptr && view->placement.cache_aware();
  const KvBlockLookup* lookup = kv_lookup_.load();
  const bool kv_aware =
      prefill && !prompt.tokens.empty() && lookup != nullptr && view->placement.kv_events();
  const size_t rotation = rotation_[RotationIndex(phase)].fetch_add(1, std::memory_order_relaxed);
  const ImbalanceLimit limit = LimitOf(view->placement);
  std::optional<Choice> choice;
  if (cache_aware) {
    for (Candidate& c : candidates) {
      const EngineRecord& e = *view->engines[c.index].engine;
      c.match = e.Match(*prompt.text);
      c.indexed = e.IndexSize();
    }
    choice = ChooseCacheAware(candidates, rotation, limit);
  } else if (kv_aware) {
    MatchKvBlocks(*lookup, *view, prompt.tokens, candidates);
    choice = ChooseCacheAware(candidates, rotation, limit);
  } else if (std::optional<size_t> pos = ChooseLeastLoaded(candidates, rotation)) {
    choice = Choice{*pos, candidates[*pos].avoid ? PlacementReason::kSameWorker
                                                 : PlacementReason::kLeastLoaded};
  }
  if (!choice) return std::nullopt;
  const Candidate& chosen = candidates[choice->pos];
  const EngineRef& engine = view->engines[chosen.index].engine;
  PlacementInfo placed;
  placed.reason = choice->reason;
  // A last-resort engine (B5) keeps that name whatever matched.
  if (chosen.avoid && placed.reason == PlacementReason::kLeastLoaded) {
    placed.reason = PlacementReason::kSameWorker;
  }
  if (cache_aware) {
    placed.match_bytes = std::min(chosen.match * PrefixIndex::kChunkBytes, prompt.text->text_bytes);
    placed.prompt_bytes = prompt.text->text_bytes;
    // Indexed when placed, so the prompts that follow it find it at once.
    engine->Insert(*prompt.text);
  }
  if (kv_aware) placed.match_tokens = MatchedTokens(chosen, prompt);
  engine->AddInflight(phase, 1);
  Reservation r;
  r.engine_ = engine;
  r.phase_ = phase;
  r.reason_ = placed.reason;
  CountDecision(phase, placed.reason);
  if (metrics_ != nullptr && placed.prompt_bytes > 0) {
    metrics_->placement.ObserveMatchFraction(static_cast<double>(placed.match_bytes) /
                                             static_cast<double>(placed.prompt_bytes));
  } else if (metrics_ != nullptr && kv_aware) {
    metrics_->placement.ObserveMatchFraction(static_cast<double>(placed.match_tokens) /
                                             static_cast<double>(prompt.tokens.size()));
  }
  if (info != nullptr) *info = placed;
  return r;
}

std::optional<Fleet::Reservation> Fleet::ReserveDecode(const std::vector<std::string>& excluded,
                                                       const std::string& avoid,
                                                       PlacementInfo* info,
                                                       const PlacementPrompt& prompt) {
  const MonoTime now = clock_.Now();
  const std::shared_ptr<const PlacementView> view = View();
  std::vector<Candidate> candidates = Candidates(*view, Phase::kDecode, excluded, avoid, now);
  const size_t rotation = rotation_[1].fetch_add(1, std::memory_order_relaxed);
  const KvBlockLookup* lookup = kv_lookup_.load();
  const bool kv_aware = !prompt.tokens.empty() && lookup != nullptr;
  std::optional<Choice> choice;
  if (kv_aware) {
    MatchKvBlocks(*lookup, *view, prompt.tokens, candidates);
    choice = ChooseCacheAware(candidates, rotation, LimitOf(view->placement));
  } else if (std::optional<size_t> pos = ChooseLeastLoaded(candidates, rotation)) {
    choice = Choice{*pos, PlacementReason::kLeastLoaded};
  }
  if (!choice) return std::nullopt;
  const Candidate& chosen = candidates[choice->pos];
  Reservation r;
  r.engine_ = view->engines[chosen.index].engine;
  r.engine_->AddReserved(1);
  r.phase_ = Phase::kDecode;
  r.reserved_ = true;
  r.reason_ = chosen.avoid && choice->reason == PlacementReason::kLeastLoaded
                  ? PlacementReason::kSameWorker
                  : choice->reason;
  if (info != nullptr) {
    PlacementInfo placed;
    placed.reason = r.reason_;
    if (kv_aware) placed.match_tokens = MatchedTokens(chosen, prompt);
    *info = placed;
  }
  return r;
}

bool Fleet::Activate(Reservation& reservation, const std::vector<std::string>& excluded) {
  if (!reservation || !reservation.reserved_) return static_cast<bool>(reservation);
  const MonoTime now = clock_.Now();
  // Against the current view: the consumer may have left placement (or the
  // fleet) while the prefill ran.
  const std::shared_ptr<const PlacementView> view = View();
  const ViewEngine* e = view->Find(reservation.engine_->iid());
  const std::string& iid = reservation.engine_->iid();
  const bool placeable = e != nullptr && e->engine == reservation.engine_ &&
                         view->Eligible(*e, Phase::kDecode, now) &&
                         std::find(excluded.begin(), excluded.end(), iid) == excluded.end();
  if (!placeable) {
    reservation.Release();
    return false;
  }
  reservation.engine_->AddReserved(-1);
  reservation.engine_->AddInflight(Phase::kDecode, 1);
  reservation.reserved_ = false;
  CountDecision(Phase::kDecode, reservation.reason_);
  return true;
}

bool Fleet::CanPlace(Phase phase, const std::vector<std::string>& excluded) const {
  return View()->CanPlace(phase, excluded, clock_.Now());
}

// ------------------------------------------------------------ reports

void Fleet::DecodeStarted(const std::string& producer, const std::string& consumer) {
  if (producer.empty() || consumer.empty() || producer == consumer) return;
  auto* r = new QueuedReport();
  r->decode_started = true;
  r->producer = producer;
  r->consumer = consumer;
  Queue(r);
}

void Fleet::Report(AttemptReport report) {
  auto* r = new QueuedReport();
  r->attempt = std::move(report);
  Queue(r);
}

void Fleet::Queue(QueuedReport* report) {
  reports_.push(report);
  if (!owner_executor_) {
    Sync();  // tests: applied by the call that queues it
    return;
  }
  if (apply_posted_.exchange(true, std::memory_order_acq_rel)) return;
  boost::asio::post(*owner_executor_, [guard = apply_guard_] {
    std::lock_guard<std::mutex> lock(guard->mu);
    if (guard->fleet == nullptr) return;
    guard->fleet->apply_posted_.store(false, std::memory_order_release);
    guard->fleet->Sync();
  });
}

void Fleet::Sync() {
  if (reports_.empty()) return;
  std::lock_guard<std::mutex> lock(apply_mu_);
  QueuedReport* report = nullptr;
  while (reports_.pop(report)) {
    std::unique_ptr<QueuedReport> owned(report);
    Apply(*owned);
  }
}

void Fleet::CountAttemptFailure(const engines::EngineFailure& f) {
  if (metrics_ == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  const int i = book_.Find(f.iid);
  // An engine that left has no series any more: its failure is not counted.
  if (i < 0) return;
  if (prometheus::Counter* c = members_[i].series.AttemptFailures(f.phase, f.reason)) {
    c->Increment();
  }
}

void Fleet::Apply(const QueuedReport& report) {
  if (report.decode_started) {
    std::lock_guard<std::mutex> lock(mu_);
    recompute_.DecodeStarted(report.consumer, report.producer);
    return;
  }
  ApplyAttempt(report.attempt);
}

void Fleet::ApplyAttempt(const AttemptReport& a) {
  if (a.prefill_ok) DoRecordSuccess(a.producer, Success::kPrefillHandoff, a.producer_incarnation);
  if (a.crossed_decode) {
    DoRecomputeDecodeEnded(a.producer, a.consumer, a.recompute_suspected, a.decode_failed,
                           a.recompute_evidence);
  }
  if (a.decode_ok) {
    DoRecordSuccess(a.consumer, Success::kDecodeDone, a.consumer_incarnation);
    if (a.crossed_decode && !a.recompute_suspected) {
      std::lock_guard<std::mutex> lock(mu_);
      if ((a.producer_incarnation == 0 || IsMemberLocked(a.producer, a.producer_incarnation)) &&
          (a.consumer_incarnation == 0 || IsMemberLocked(a.consumer, a.consumer_incarnation))) {
        links_.RecordSuccess(a.producer, a.consumer, clock_.Now());
      }
    }
  }
  if (a.failure) {
    CountAttemptFailure(*a.failure);
    // Breaker evidence (never for client 4xx, cancellation or the deadline);
    // an engine that refused the client's request is alive.
    // Evidence is about the incarnations the attempt was placed on.
    DoRecordFailure(*a.failure, a.producer, a.producer_incarnation, a.consumer_incarnation);
    if (a.failure->reason == engines::FailureReason::kEngineRejected) {
      DoRecordSuccess(
          a.failure->iid, Success::kEngineRejected,
          a.failure->iid == a.producer ? a.producer_incarnation : a.consumer_incarnation);
    }
  }
}

}  // namespace narwhal::router
