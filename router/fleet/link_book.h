// LinkBook: per-link health of the producer→consumer links, as pure logic.
//
// A link is an ordered pair (producer P, consumer C), P != C, that the
// fleet's roles permit (P can prefill, C can decode). The book keeps a link
// only once there is evidence about it (a crossed decode over it), so its
// memory follows the pairs traffic used, at most producers × consumers;
// links of engines that left the fleet go with them (SetEngines). Like
// BreakerBook it owns no timers, threads or locks: every call takes `now`,
// and every state change is returned as a LinkEvent for the caller to
// publish.
//
// Evidence: each crossed decode (prefill on P, decode on C) that ends with
// breaker evidence is a link failure; each one that reaches [DONE], and each
// passed link probe, a link success. Node-level breakers get the same
// evidence as before (the book is an addition, not a replacement).
//
// Rules:
//  - Hold: at links.hold_after consecutive failures over P→C, the link is
//    held only when the failures concentrate on it: P completed a crossed
//    decode with another consumer and C one with another producer, both
//    since the streak's first failure and within links.window_s. When P
//    fails with every consumer (or C with every producer) the fault is the
//    engine's, the node breaker's business, and no link is held.
//  - A held link keeps both engines in placement; decode placement for a
//    handoff from P avoids C (last resort: used only when no other
//    consumer can take the decode, as a same-engine decode is).
//  - Readmission: a link probe over that link (a one-token prefill on P, its
//    handoff decoded by C) runs at once and then every
//    recovery.readmit_interval_s while both engines serve; a passed probe
//    readmits the link, a failed one backs the next off to interval ×
//    failures (at most kMaxProbeBackoff intervals), an inconclusive one (P's
//    prefill failed) keeps the cadence.
#ifndef NARWHAL_ROUTER_FLEET_LINK_BOOK_H_
#define NARWHAL_ROUTER_FLEET_LINK_BOOK_H_

#include <absl/container/flat_hash_map.h>

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "engines/api.h"
#include "router/common/settings.h"
#include "router/fleet/fleet_event_kind.h"

namespace narwhal::router {

using engines::MonoTime;

enum class LinkState { kServing, kHeld };
std::string_view LinkStateName(LinkState s);

enum class LinkProbeOutcome { kPassed, kFailed, kInconclusive };
std::string_view LinkProbeOutcomeName(LinkProbeOutcome o);

struct Link {
  std::string producer_iid;
  std::string consumer_iid;
  LinkState state = LinkState::kServing;
  MonoTime since{};   // when the current state began (its first evidence for a link never held)
  std::string cause;  // why it is held, or how it was last readmitted
  // Evidence.
  int streak = 0;  // consecutive failures over the link
  MonoTime streak_started{};
  long long successes = 0;
  long long failures = 0;
  std::optional<MonoTime> last_success;
  std::optional<MonoTime> last_failure;
  std::string last_failure_detail;
  // Whether the latest evidence was a success, and the streak it ended
  // (ReclassifyLastSuccess).
  bool last_was_success = false;
  int success_reset_streak = 0;
  MonoTime success_reset_started{};
  // Readmission probes (held links only).
  MonoTime next_probe_at = MonoTime::max();
  int probe_failures = 0;
  bool probe_running = false;
};

// One change of link state (or a probe result), for metrics, the journal,
// the log and WatchEvents.
struct LinkEvent {
  FleetEventKind kind = FleetEventKind::kLinkProbe;  // kLinkHeld | kLinkReadmitted | kLinkProbe
  std::string producer;
  std::string consumer;
  std::string cause;
  std::optional<LinkProbeOutcome> outcome;  // probe outcome
  std::string detail;
};

// A link probe the monitor should run now.
struct LinkProbeTask {
  size_t link = 0;  // in the book when it was taken
  std::string producer;
  std::string consumer;
};

class LinkBook {
 public:
  static constexpr int kMaxProbeBackoff = 10;  // intervals

  LinkBook(const std::vector<EngineSettings>& engines, const LinkSettings& settings,
           double readmit_interval_s);

  // The fleet's engines now: links of engines that left (or whose role no
  // longer permits the pair) are dropped.
  void SetEngines(const std::vector<EngineSettings>& engines);
  // A reload's settings, for the evidence that follows.
  void SetSettings(const LinkSettings& settings, double readmit_interval_s);

  size_t size() const { return links_.size(); }
  const Link& link(size_t k) const { return links_[k]; }
  // Index of the link producer→consumer, or -1 (no evidence about it yet,
  // unknown engine, same engine, or a pair the roles do not permit).
  int Find(const std::string& producer, const std::string& consumer) const;

  // A crossed decode over producer→consumer failed with breaker evidence.
  std::vector<LinkEvent> RecordFailure(const std::string& producer, const std::string& consumer,
                                       const std::string& detail, MonoTime now);
  // A crossed decode over producer→consumer reached [DONE].
  void RecordSuccess(const std::string& producer, const std::string& consumer, MonoTime now);

  // A crossed decode counted as a success turned out to have failed (its
  // consumer's failed-transfer counter rose, router/fleet/kv_recompute.h): when
  // the link's latest evidence is a success, it is taken back and the streak
  // it ended resumes; then a failure is recorded as RecordFailure does.
  std::vector<LinkEvent> ReclassifyLastSuccess(const std::string& producer,
                                               const std::string& consumer,
                                               const std::string& detail, MonoTime now);

  bool Held(const std::string& producer, const std::string& consumer) const;

  // Probes due at `now` of held links whose two engines serve (`serving`
  // says whether an engine is in placement), marked running.
  std::vector<LinkProbeTask> TakeDueProbes(MonoTime now,
                                           const std::function<bool(const std::string&)>& serving);
  std::vector<LinkEvent> CompleteProbe(size_t k, LinkProbeOutcome outcome,
                                       const std::string& detail, MonoTime now);

 private:
  static std::string Key(const std::string& producer, const std::string& consumer);
  // The link, made on its first evidence; -1 when the pair is not a link.
  int FindOrCreate(const std::string& producer, const std::string& consumer, MonoTime now);
  // Whether P (C) completed a crossed decode with another consumer
  // (producer) at or after `after`; names that peer in *peer.
  bool ProducerOkElsewhere(const Link& l, MonoTime after, std::string* peer) const;
  bool ConsumerOkElsewhere(const Link& l, MonoTime after, std::string* peer) const;
  void Reindex();

  LinkSettings settings_;
  double readmit_interval_s_;
  absl::flat_hash_map<std::string, Role> roles_;  // iid -> role
  std::vector<Link> links_;
  absl::flat_hash_map<std::string, int> index_;  // Key(p, c) -> link index
  absl::flat_hash_map<std::string, std::vector<int>> by_producer_;
  absl::flat_hash_map<std::string, std::vector<int>> by_consumer_;
};

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_FLEET_LINK_BOOK_H_
