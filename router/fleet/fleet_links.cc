// Fleet's per-link health: the LinkBook behind Fleet's mutex, its gauges,
// log lines and events (router/fleet/link_book.h has the rules).
#include "router/common/log.h"
#include "router/fleet/fleet.h"

namespace narwhal::router {

void Fleet::SetLinkGaugeLocked(const std::string& producer, const std::string& consumer,
                               bool held) {
  if (metrics_ == nullptr) return;
  // A series only while the link is held: a fleet of N engines has up to
  // N^2 links, and a scrape must stay small.
  prometheus::Gauge& g = metrics_->link_held.Add({{"producer", producer}, {"consumer", consumer}});
  if (held) {
    g.Set(1);
  } else {
    metrics_->link_held.Remove(&g);
  }
}

void Fleet::RecordLinkFailure(const engines::EngineFailure& failure, const std::string& producer,
                              uint64_t producer_incarnation, uint64_t consumer_incarnation) {
  // A crossed decode leg: prefill on `producer`, decode on failure.iid.
  if (failure.phase != Phase::kDecode || producer.empty() || failure.iid.empty() ||
      producer == failure.iid) {
    return;
  }
  std::vector<LinkEvent> events;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Not a link of the fleet's engines when either end has left since.
    if ((producer_incarnation != 0 && !IsMemberLocked(producer, producer_incarnation)) ||
        (consumer_incarnation != 0 && !IsMemberLocked(failure.iid, consumer_incarnation))) {
      return;
    }
    const std::string detail =
        std::string(engines::FailureReasonName(failure.reason)) + ": " + failure.detail;
    events = links_.RecordFailure(producer, failure.iid, detail, clock_.Now());
    PublishViewLocked();
  }
  EmitLinks(events);
}

void Fleet::RecordLinkSuccess(const std::string& producer, const std::string& consumer) {
  Sync();
  std::lock_guard<std::mutex> lock(mu_);
  links_.RecordSuccess(producer, consumer, clock_.Now());
}

std::vector<LinkProbeTask> Fleet::TakeDueLinkProbes() {
  Sync();
  const MonoTime now = clock_.Now();
  std::lock_guard<std::mutex> lock(mu_);
  return links_.TakeDueProbes(now, [&](const std::string& iid) {
    const int i = book_.Find(iid);
    return i >= 0 && !members_[i].joining && book_.State(i, now) == PlacementState::kServing;
  });
}

void Fleet::CompleteLinkProbe(const LinkProbeTask& task, LinkProbeOutcome outcome,
                              const std::string& detail) {
  Sync();
  std::vector<LinkEvent> events;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const int k = links_.Find(task.producer, task.consumer);
    if (k < 0) return;  // an engine of it left the fleet meanwhile
    events = links_.CompleteProbe(static_cast<size_t>(k), outcome, detail, clock_.Now());
    PublishViewLocked();
  }
  EmitLinks(events);
}

std::vector<LinkSnapshot> Fleet::Links() const {
  const_cast<Fleet*>(this)->Sync();
  const MonoTime now = clock_.Now();
  const double wall = clock_.WallNow();
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<LinkSnapshot> out;
  out.reserve(links_.size());
  for (size_t k = 0; k < links_.size(); ++k) {
    const Link& l = links_.link(k);
    LinkSnapshot s;
    s.producer = l.producer_iid;
    s.consumer = l.consumer_iid;
    s.state = l.state;
    s.since = wall - engines::Seconds(now - l.since);
    s.cause = l.cause;
    s.streak = l.streak;
    s.successes = l.successes;
    s.failures = l.failures;
    if (l.last_success) s.last_success_age_s = engines::Seconds(now - *l.last_success);
    if (l.last_failure) s.last_failure_age_s = engines::Seconds(now - *l.last_failure);
    s.last_failure = l.last_failure_detail;
    if (l.state == LinkState::kHeld && l.next_probe_at != MonoTime::max()) {
      s.next_probe_in_s = std::max(0.0, engines::Seconds(l.next_probe_at - now));
    }
    s.probe_failures = l.probe_failures;
    s.probe_running = l.probe_running;
    out.push_back(std::move(s));
  }
  return out;
}

void Fleet::EmitLinks(const std::vector<LinkEvent>& events) {
  for (const LinkEvent& e : events) {
    const std::string link = e.producer + "->" + e.consumer;
    if (e.kind == FleetEventKind::kLinkHeld || e.kind == FleetEventKind::kLinkReadmitted) {
      const bool held = e.kind == FleetEventKind::kLinkHeld;
      {
        std::lock_guard<std::mutex> lock(mu_);
        SetLinkGaugeLocked(e.producer, e.consumer, held);
      }
      LogInfo("link " + link + (held ? " held out of decode placement: " : " readmitted: ") +
              e.cause + (e.detail.empty() ? "" : " (" + e.detail + ")"));
    } else if (e.kind == FleetEventKind::kLinkProbe && e.outcome &&
               *e.outcome != LinkProbeOutcome::kPassed) {
      LogInfo("link " + link + " probe " + std::string(LinkProbeOutcomeName(*e.outcome)) + ": " +
              e.detail);
    }
    Publish(FromLinkEvent(e));
  }
}

}  // namespace narwhal::router
