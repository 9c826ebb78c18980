// Fleet: the engines, their breaker, link and recompute books, and the
// snapshot requests place from.
//
// Two sides:
//  - The request path (any loop, never blocks, takes no lock shared by all
//    requests): View() returns the current immutable PlacementView;
//    PickAndReserve / ReserveDecode / Activate / CanPlace place legs from it
//    and keep per-engine load in the EngineRecords' atomics; a Reservation
//    is RAII and releases its slot on every path (B7), even after its
//    engine left the fleet; DecodeStarted() and Report() hand what an
//    attempt saw to the owner without waiting (a lock-free queue).
//  - The owner, split by caller: control() (router/fleet/fleet_control.h:
//    the monitor, prober and start-up checks) and admin()
//    (router/fleet/fleet_admin.h: operators, reloads, DNS groups and the
//    read-outs). They run under the owner's mutex, which no request takes;
//    reports queued by requests are applied first, so a reader sees every
//    attempt that finished before it asked. After every change that moves
//    placement the owner publishes a new view (one atomic swap).
// Every breaker and link change is published once: to the metrics, the
// journal (event rows) and the event bus.
#ifndef NARWHAL_ROUTER_FLEET_FLEET_H_
#define NARWHAL_ROUTER_FLEET_FLEET_H_

#include <absl/status/status.h>

#include <array>
#include <atomic>
#include <boost/lockfree/queue.hpp>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engines/engine_client.h"
#include "engines/engine_failure.h"
#include "engines/snapshot_slot.h"
#include "router/common/clock.h"
#include "router/common/journal.h"
#include "router/common/metrics.h"
#include "router/common/settings.h"
#include "router/fleet/attempt_report.h"
#include "router/fleet/breaker_book.h"
#include "router/fleet/engine_record.h"
#include "router/fleet/engine_series.h"
#include "router/fleet/engine_snapshot.h"
#include "router/fleet/event_bus.h"
#include "router/fleet/fleet_admin.h"
#include "router/fleet/fleet_control.h"
#include "router/fleet/fleet_event.h"
#include "router/fleet/fleet_event_counts.h"
#include "router/fleet/kv_block_lookup.h"
#include "router/fleet/kv_recompute.h"
#include "router/fleet/link_book.h"
#include "router/fleet/membership.h"
#include "router/fleet/placement.h"
#include "router/fleet/placement_view.h"
#include "router/fleet/prefix_index.h"

namespace narwhal::router {

// How one leg was placed (journal and metrics).
struct PlacementInfo {
  PlacementReason reason = PlacementReason::kLeastLoaded;
  size_t match_bytes = 0;   // prompt bytes the producer's prefix index held
  size_t prompt_bytes = 0;  // bytes of the prompt's rendered text
  // With token ids (kv_events, B27/B28): the prompt's tokens the chosen
  // engine's KV-event index holds (leading blocks x block size, at most
  // the prompt).
  size_t match_tokens = 0;
};

// What placement knows of a prompt: its text key (placement.prefill
// "cache_aware") and its token ids (KV-event matches, B27/B28). Either may
// be absent.
struct PlacementPrompt {
  const PromptKey* text = nullptr;
  std::span<const uint32_t> tokens;
  int block_size = 16;  // kv_events.block_size
};

class Fleet : private FleetControl, private FleetAdmin {
 public:
  // `metrics`, `journal` and `events` may be null.
  Fleet(const Settings& settings, const Clock& clock, Metrics* metrics, Journal* journal = nullptr,
        EventBus* events = nullptr);
  ~Fleet();
  Fleet(const Fleet&) = delete;
  Fleet& operator=(const Fleet&) = delete;

  // Where queued reports are applied: a task posted to `executor` (the
  // owner's loop) when the queue becomes non-empty. Without one (tests),
  // each report is applied by the call that queues it. Call before the
  // first request.
  void SetOwnerExecutor(engines::Executor executor);

  class Reservation {
   public:
    Reservation() = default;
    Reservation(Reservation&& other) noexcept { *this = std::move(other); }
    Reservation& operator=(Reservation&& other) noexcept;
    ~Reservation() { Release(); }
    void Release();
    const engines::EngineTarget& target() const { return engine_->target(); }
    const EngineRef& engine() const { return engine_; }
    PlacementReason reason() const { return reason_; }
    explicit operator bool() const { return engine_ != nullptr; }

   private:
    friend class Fleet;
    EngineRef engine_;
    Phase phase_ = Phase::kPrefill;
    bool reserved_ = false;  // a decode leg whose prefill runs (ReserveDecode)
    PlacementReason reason_ = PlacementReason::kLeastLoaded;
  };

  // --- the request path: lock-free ---
  // The current snapshot (never null).
  std::shared_ptr<const PlacementView> View() const;

  // Places a leg: an engine in placement for `phase`, not in `excluded`,
  // least in-flight first; `avoid` (decode: the producer, B5) only when no
  // other engine can take it. Nullopt when no engine can.
  // Prefill with a text key under placement.prefill "cache_aware": the
  // longest prefix match instead (ChooseCacheAware), and the prompt is
  // indexed for the chosen producer; with token ids under "kv_events": the
  // longest run of leading blocks the producers' KV-event indexes hold
  // (same guard). Decode counts reserved legs as load too. `info`, when
  // given, says why.
  std::optional<Reservation> PickAndReserve(Phase phase, const std::vector<std::string>& excluded,
                                            const std::string& avoid = "",
                                            const PlacementPrompt& prompt = {},
                                            PlacementInfo* info = nullptr);
  // A decode leg placed before its prefill runs: counted as reserved on the
  // consumer (placement load, not in flight), so a burst of prefills spreads
  // over the consumers before any decode starts. Activate() it once the
  // handoff exists. With the prompt's token ids and a KV lookup, the
  // consumer holding the longest run of its leading blocks (same guard as
  // the prefill's; B28 chooses the decode engine first).
  std::optional<Reservation> ReserveDecode(const std::vector<std::string>& excluded,
                                           const std::string& avoid, PlacementInfo* info = nullptr,
                                           const PlacementPrompt& prompt = {});
  // The engines' KV-event indexes placement matches token ids against
  // (null: none; every engine holds nothing). Call before the first
  // request; `lookup` must outlive the Fleet.
  void SetKvLookup(const KvBlockLookup* lookup) { kv_lookup_.store(lookup); }
  // Turns a ReserveDecode() reservation into an in-flight leg when its
  // consumer is still in placement and not in `excluded`; else releases it
  // and returns false (place the leg again).
  bool Activate(Reservation& reservation, const std::vector<std::string>& excluded);
  // Whether a leg of `phase` could be placed outside `excluded` now.
  bool CanPlace(Phase phase, const std::vector<std::string>& excluded) const;

  // A crossed decode producer->consumer was sent (silent-recompute ledger).
  void DecodeStarted(const std::string& producer, const std::string& consumer);
  // One finished attempt (router/fleet/attempt_report.h).
  void Report(AttemptReport report);

  // The owner's applier: every queued report now (what the owner's loop does
  // on its own).
  void Sync();

  // True when every role has an engine in placement that passed a check
  // since start; else *why says which not. Lock-free (the view).
  bool Ready(std::string* why) const;
  // The model's context length (the smallest an engine reported, or the
  // pinned one); 0 while unknown. Lock-free: read on every request.
  long long max_model_len() const;

  // --- the owner's two sides, by caller ---
  FleetControl& control() { return *this; }  // monitor, prober, checks
  FleetAdmin& admin() { return *this; }      // operators, reloads, read-outs
  const FleetAdmin& admin() const { return *this; }

 private:
  // --- FleetControl (fleet_breakers.cc, fleet_links.cc, fleet_recompute.cc,
  // fleet_membership.cc, fleet_model_len.cc) ---
  std::shared_ptr<const Settings> settings() const override;
  std::vector<EngineSettings> engines() const override;
  std::optional<engines::EngineTarget> Target(const std::string& iid) const override;
  std::optional<EngineSnapshot> Snapshot(const std::string& iid) const override;
  bool Checked(const std::string& iid) const override;
  std::vector<KvEndpoint> KvEndpoints() const override;
  void RecordFailure(const engines::EngineFailure& failure, const std::string& producer) override;
  void RecordSuccess(const std::string& iid, Success kind) override;
  void RecordLinkSuccess(const std::string& producer, const std::string& consumer) override;
  void RecordMaxModelLen(const std::string& iid, long long max_model_len) override;
  std::vector<ProbeTask> TakeDueProbes() override;
  void CompleteProbe(const ProbeTask& task, ProbeOutcome outcome, const std::string& detail,
                     const std::string& producer) override;
  void RecordProbeAttempt(const ProbeTask& task, ProbeOutcome outcome, const std::string& producer,
                          const std::string& detail) override;
  Phase ProbeSide(const std::string& iid) const override;
  std::string RecordedProducer(const std::string& iid) const override;
  std::vector<engines::EngineTarget> LiveProducers(const std::string& except) const override;
  std::optional<engines::EngineTarget> LiveConsumer(const std::string& except) const override;
  std::vector<LinkProbeTask> TakeDueLinkProbes() override;
  void CompleteLinkProbe(const LinkProbeTask& task, LinkProbeOutcome outcome,
                         const std::string& detail) override;
  void RecomputeDecodeStarted(const std::string& producer, const std::string& consumer) override;
  void RecomputeDecodeEnded(const std::string& producer, const std::string& consumer,
                            bool suspected, bool failed, const std::string& evidence) override;
  void RecomputeProbeEnded(const std::string& producer, const std::string& consumer,
                           bool explained) override;
  std::vector<RecomputeScrapeTask> TakeDueRecomputeScrapes() override;
  void CompleteRecomputeScrape(const RecomputeScrapeTask& task,
                               std::optional<double> failed_transfers) override;
  std::vector<JoinTask> TakeDueJoinChecks() override;
  void CompleteJoinCheck(const JoinTask& task, bool passed, const std::string& detail) override;
  std::vector<engines::EngineTarget> JoiningPeers(Phase phase,
                                                  const std::string& except) const override;
  void SweepLeaving() override;

  // --- FleetAdmin (fleet.cc, fleet_breakers.cc, fleet_links.cc,
  // fleet_membership.cc) ---
  void ApplySettings(std::shared_ptr<const Settings> settings) override;
  void SetMembershipOptions(const MembershipOptions& options) override;
  absl::Status Eject(const std::string& iid, const std::string& detail) override;
  absl::Status Drain(const std::string& iid) override;
  absl::Status Readmit(const std::string& iid, const std::string& evidence) override;
  absl::Status ReleaseQuarantine(const std::string& iid) override;
  std::string LastInPlacement(const std::string& iid) const override;
  absl::Status AddEngine(const EngineSettings& engine, const MemberSource& source) override;
  absl::Status RemoveEngine(const std::string& iid, const MemberSource& by) override;
  MembershipChange Reconcile(const MemberSource& source,
                             const std::vector<EngineSettings>& desired) override;
  bool Contains(const std::string& iid) const override;
  std::vector<EngineSnapshot> Snapshot() const override;
  std::vector<LinkSnapshot> Links() const override;
  std::map<std::string, EngineEventCounts> EventCounts() const override;
  void PublishAll() override;
  void Publish(const FleetEvent& event) override;

  struct QueuedReport;
  // Candidates for a leg of `phase` from `view`.
  std::vector<Candidate> Candidates(const PlacementView& view, Phase phase,
                                    const std::vector<std::string>& excluded,
                                    const std::string& avoid, MonoTime now) const;
  void CountDecision(Phase phase, PlacementReason reason);
  static size_t MatchedTokens(const Candidate& c, const PlacementPrompt& prompt);
  static void MatchKvBlocks(const KvBlockLookup& lookup, const PlacementView& view,
                            std::span<const uint32_t> tokens, std::vector<Candidate>& candidates);
  // A task posted to the owner's executor holds this, not the fleet: a
  // fleet that is gone is seen as such.
  struct ApplyGuard {
    std::mutex mu;
    Fleet* fleet = nullptr;
  };
  void Queue(QueuedReport* report);
  // `*_incarnation`: the engines the evidence is about (0 = whichever has
  // the iid now); evidence about an incarnation that left is dropped.
  void DoRecordFailure(const engines::EngineFailure& failure, const std::string& producer,
                       uint64_t producer_incarnation = 0, uint64_t consumer_incarnation = 0);
  void DoRecordSuccess(const std::string& iid, Success kind, uint64_t incarnation = 0);
  // Engine `iid` is a member and, when `incarnation` is not 0, that
  // incarnation of it (mu_ held).
  bool IsMemberLocked(const std::string& iid, uint64_t incarnation) const;
  void DoRecomputeDecodeEnded(const std::string& producer, const std::string& consumer,
                              bool suspected, bool failed, const std::string& evidence);
  template <typename Action>
  absl::Status Operate(const std::string& iid, Action action);
  void Apply(const QueuedReport& report);
  void ApplyAttempt(const AttemptReport& report);
  // An ejected or readmitted engine's cache is gone: so is its index.
  void ForgetCaches(const std::vector<BreakerEvent>& events);
  void PublishLocked(size_t index);  // refresh the engine's gauges
  // The same, with what every engine's gauges read computed once: the time
  // and whether a whole-wave hold is on. Sets only the gauges that change.
  void PublishLocked(size_t index, MonoTime now, bool wave_hold);
  void PublishAllLocked();
  // Builds the view from the books and publishes it when placement moved.
  void PublishViewLocked();
  // Metrics, journal and event bus for breaker events (called without mu_).
  void Emit(const std::vector<BreakerEvent>& events);
  EngineSnapshot SnapshotLocked(size_t i, MonoTime now) const;
  void CountAttemptFailure(const engines::EngineFailure& failure);
  // Link evidence from a failed crossed decode; link gauges and events.
  void RecordLinkFailure(const engines::EngineFailure& failure, const std::string& producer,
                         uint64_t producer_incarnation, uint64_t consumer_incarnation);
  // link_held{producer,consumer}: a series while the link is held only.
  void SetLinkGaugeLocked(const std::string& producer, const std::string& consumer, bool held);
  void EmitLinks(const std::vector<LinkEvent>& events);

  // One member of the fleet, as book_'s entry of the same index.
  struct Member {
    EngineRef engine;
    MemberSource source;
    EngineSeries series;
    MonoTime next_scrape{};  // silent-recompute scrape of a consumer
    bool scrape_running = false;
    // Joining (B22): no client leg until its join checks pass.
    bool joining = false;
    MonoTime next_join_check{};
    int join_failures = 0;
    bool join_running = false;
    std::string join_failure;  // the last one's cause
    // KV-event endpoints (a reload may change them in place).
    std::string kv_events;
    std::string kv_events_replay;
  };
  // An engine that left the fleet and still has legs in flight (B23).
  struct Leaving {
    EngineRef engine;
    MemberSource source;
    EngineSeries series;
    MonoTime since;
    MonoTime deadline;
    bool cancelled = false;
  };
  // The breaker state of an engine that left, kept for its return (B21).
  struct Remembered {
    std::string url;
    EngineBreaker breaker;
    MonoTime until;
  };
  EngineSnapshot LeavingSnapshotLocked(const Leaving& l, MonoTime now) const;
  // Adds a member (mu_ held); `joining` engines wait for their join checks.
  size_t AddMemberLocked(const EngineSettings& engine, const MemberSource& source, bool joining,
                         std::vector<FleetEvent>* events);
  // Takes member `i` out into leaving_ (mu_ held).
  void RemoveMemberLocked(size_t i, const std::string& why, std::vector<BreakerEvent>* breaker,
                          std::vector<FleetEvent>* events);
  // Series of `iid` go once no member or leaving engine has that iid.
  void RemoveSeriesIfUnusedLocked(const EngineSettings& engine);
  void PublishMembershipLocked();  // narwhal_fleet_engines{role,state}
  void CountMembershipChange(const MemberSource& source, const char* change);
  // The book's settings in order (links, Reconcile).
  std::vector<EngineSettings> MemberSettingsLocked() const;

  std::shared_ptr<const Settings> settings_;  // mu_
  const Clock& clock_;
  Metrics* metrics_;
  std::atomic<const KvBlockLookup*> kv_lookup_{nullptr};
  Journal* journal_;
  EventBus* events_;
  FleetEventCounts counts_;
  mutable std::mutex mu_;  // the owner's; never taken by a request
  BreakerBook book_;
  LinkBook links_;
  std::vector<Member> members_;  // as book_
  std::vector<Leaving> leaving_;
  std::map<std::string, Remembered> remembered_;  // by iid
  MembershipOptions membership_;
  uint64_t next_incarnation_ = 0;
  // Silent-recompute detection.
  RecomputeLedger recompute_;
  std::atomic<long long> max_model_len_{0};
  std::atomic<long long> pinned_max_model_len_{0};  // engine_contract.max_model_len

  // The published view.
  engines::SnapshotSlot<PlacementView> view_{std::make_shared<PlacementView>()};
  std::array<std::atomic<size_t>, 2> rotation_{};  // per phase, so each spreads on its own

  // Reports queued by requests, applied by the owner in order.
  boost::lockfree::queue<QueuedReport*> reports_{128};
  std::mutex apply_mu_;  // one applier at a time, in queue order
  std::atomic<bool> apply_posted_{false};
  std::optional<engines::Executor> owner_executor_;
  std::shared_ptr<ApplyGuard> apply_guard_;
};

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_FLEET_FLEET_H_
