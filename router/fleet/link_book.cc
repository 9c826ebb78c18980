#include "router/fleet/link_book.h"

#include <algorithm>
#include <cstdio>

namespace narwhal::router {
namespace {

LinkEvent Event(FleetEventKind kind, const Link& l) {
  LinkEvent e;
  e.kind = kind;
  e.producer = l.producer_iid;
  e.consumer = l.consumer_iid;
  return e;
}

std::string FormatSeconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", s);
  return buf;
}

}  // namespace

std::string_view LinkStateName(LinkState s) { return s == LinkState::kHeld ? "held" : "serving"; }

std::string_view LinkProbeOutcomeName(LinkProbeOutcome o) {
  switch (o) {
    case LinkProbeOutcome::kPassed:
      return "passed";
    case LinkProbeOutcome::kFailed:
      return "failed";
    case LinkProbeOutcome::kInconclusive:
      return "inconclusive";
  }
  return "inconclusive";
}

LinkBook::LinkBook(const std::vector<EngineSettings>& engines, const LinkSettings& settings,
                   double readmit_interval_s)
    : settings_(settings), readmit_interval_s_(readmit_interval_s) {
  SetEngines(engines);
}

void LinkBook::SetEngines(const std::vector<EngineSettings>& engines) {
  roles_.clear();
  for (const EngineSettings& e : engines) roles_[e.iid] = e.role;
  auto permitted = [this](const Link& l) {
    const auto p = roles_.find(l.producer_iid);
    const auto c = roles_.find(l.consumer_iid);
    return p != roles_.end() && c != roles_.end() && CanPrefill(p->second) &&
           CanDecode(c->second);
  };
  links_.erase(std::remove_if(links_.begin(), links_.end(),
                              [&](const Link& l) { return !permitted(l); }),
               links_.end());
  Reindex();
}

void LinkBook::SetSettings(const LinkSettings& settings, double readmit_interval_s) {
  settings_ = settings;
  readmit_interval_s_ = readmit_interval_s;
}

void LinkBook::Reindex() {
  index_.clear();
  by_producer_.clear();
  by_consumer_.clear();
  for (size_t k = 0; k < links_.size(); ++k) {
    const Link& l = links_[k];
    index_[Key(l.producer_iid, l.consumer_iid)] = static_cast<int>(k);
    by_producer_[l.producer_iid].push_back(static_cast<int>(k));
    by_consumer_[l.consumer_iid].push_back(static_cast<int>(k));
  }
}

std::string LinkBook::Key(const std::string& producer, const std::string& consumer) {
  std::string key;
  key.reserve(producer.size() + consumer.size() + 1);
  key.append(producer).push_back('\0');
  key.append(consumer);
  return key;
}

int LinkBook::Find(const std::string& producer, const std::string& consumer) const {
  const auto it = index_.find(Key(producer, consumer));
  return it == index_.end() ? -1 : it->second;
}

int LinkBook::FindOrCreate(const std::string& producer, const std::string& consumer,
                           MonoTime now) {
  if (const int k = Find(producer, consumer); k >= 0) return k;
  if (producer == consumer) return -1;
  const auto p = roles_.find(producer);
  const auto c = roles_.find(consumer);
  if (p == roles_.end() || c == roles_.end() || !CanPrefill(p->second) ||
      !CanDecode(c->second)) {
    return -1;
  }
  Link l;
  l.producer_iid = producer;
  l.consumer_iid = consumer;
  l.since = now;
  const int k = static_cast<int>(links_.size());
  links_.push_back(std::move(l));
  index_[Key(producer, consumer)] = k;
  by_producer_[producer].push_back(k);
  by_consumer_[consumer].push_back(k);
  return k;
}

bool LinkBook::ProducerOkElsewhere(const Link& l, MonoTime after, std::string* peer) const {
  const auto it = by_producer_.find(l.producer_iid);
  if (it == by_producer_.end()) return false;
  for (const int k : it->second) {
    const Link& o = links_[k];
    if (o.consumer_iid == l.consumer_iid) continue;
    if (o.last_success && *o.last_success >= after) {
      *peer = o.consumer_iid;
      return true;
    }
  }
  return false;
}

bool LinkBook::ConsumerOkElsewhere(const Link& l, MonoTime after, std::string* peer) const {
  const auto it = by_consumer_.find(l.consumer_iid);
  if (it == by_consumer_.end()) return false;
  for (const int k : it->second) {
    const Link& o = links_[k];
    if (o.producer_iid == l.producer_iid) continue;
    if (o.last_success && *o.last_success >= after) {
      *peer = o.producer_iid;
      return true;
    }
  }
  return false;
}

std::vector<LinkEvent> LinkBook::RecordFailure(const std::string& producer,
                                               const std::string& consumer,
                                               const std::string& detail, MonoTime now) {
  std::vector<LinkEvent> events;
  const int k = FindOrCreate(producer, consumer, now);
  if (k < 0) return events;
  Link& l = links_[k];
  l.last_was_success = false;
  ++l.failures;
  if (l.streak++ == 0) l.streak_started = now;
  l.last_failure = now;
  l.last_failure_detail = detail;
  if (l.state == LinkState::kHeld || l.streak < settings_.hold_after) return events;

  // Concentration: both engines work with other peers while this link fails.
  const MonoTime after = std::max(l.streak_started, now - engines::FromSeconds(settings_.window_s));
  std::string other_consumer;
  std::string other_producer;
  if (!ProducerOkElsewhere(l, after, &other_consumer) ||
      !ConsumerOkElsewhere(l, after, &other_producer)) {
    return events;  // the fault is an engine's: the node breakers judge it
  }
  l.state = LinkState::kHeld;
  l.since = now;
  l.cause = std::to_string(l.streak) + " consecutive failed decodes over the link while " +
            producer + " completed decodes on " + other_consumer + " and " + consumer +
            " completed decodes of handoffs from " + other_producer + " (within " +
            FormatSeconds(settings_.window_s) + " s)";
  l.next_probe_at = now;  // probe at once
  l.probe_failures = 0;
  LinkEvent e = Event(FleetEventKind::kLinkHeld, l);
  e.cause = l.cause;
  e.detail = detail;
  events.push_back(std::move(e));
  return events;
}

void LinkBook::RecordSuccess(const std::string& producer, const std::string& consumer,
                             MonoTime now) {
  const int k = FindOrCreate(producer, consumer, now);
  if (k < 0) return;
  Link& l = links_[k];
  ++l.successes;
  l.last_success = now;
  l.success_reset_streak = l.streak;
  l.success_reset_started = l.streak_started;
  l.last_was_success = true;
  l.streak = 0;
}

std::vector<LinkEvent> LinkBook::ReclassifyLastSuccess(const std::string& producer,
                                                       const std::string& consumer,
                                                       const std::string& detail, MonoTime now) {
  const int k = Find(producer, consumer);
  if (k < 0) return {};
  Link& l = links_[k];
  if (l.last_was_success && l.successes > 0) {
    // That decode failed after all: the streak it ended resumes.
    --l.successes;
    l.streak = l.success_reset_streak;
    l.streak_started = l.success_reset_started;
  }
  return RecordFailure(producer, consumer, detail, now);
}

bool LinkBook::Held(const std::string& producer, const std::string& consumer) const {
  const int k = Find(producer, consumer);
  return k >= 0 && links_[k].state == LinkState::kHeld;
}

std::vector<LinkProbeTask> LinkBook::TakeDueProbes(
    MonoTime now, const std::function<bool(const std::string&)>& serving) {
  std::vector<LinkProbeTask> tasks;
  for (size_t k = 0; k < links_.size(); ++k) {
    Link& l = links_[k];
    if (l.state != LinkState::kHeld || l.probe_running || now < l.next_probe_at) continue;
    // A probe over a link whose engine is out of placement would judge the
    // engine, not the link: it waits until both serve.
    if (!serving(l.producer_iid) || !serving(l.consumer_iid)) continue;
    l.probe_running = true;
    tasks.push_back(LinkProbeTask{k, l.producer_iid, l.consumer_iid});
  }
  return tasks;
}

std::vector<LinkEvent> LinkBook::CompleteProbe(size_t k, LinkProbeOutcome outcome,
                                               const std::string& detail, MonoTime now) {
  std::vector<LinkEvent> events;
  if (k >= links_.size()) return events;
  Link& l = links_[k];
  l.probe_running = false;
  LinkEvent probe = Event(FleetEventKind::kLinkProbe, l);
  probe.outcome = outcome;
  probe.detail = detail;
  events.push_back(probe);
  if (l.state != LinkState::kHeld) return events;
  const auto interval = engines::FromSeconds(readmit_interval_s_);
  switch (outcome) {
    case LinkProbeOutcome::kPassed: {
      l.state = LinkState::kServing;
      l.since = now;
      l.cause = "probe passed";
      l.streak = 0;
      ++l.successes;
      l.last_success = now;
      l.probe_failures = 0;
      l.next_probe_at = MonoTime::max();
      LinkEvent e = Event(FleetEventKind::kLinkReadmitted, l);
      e.cause = l.cause;
      e.detail = detail;
      events.push_back(std::move(e));
      break;
    }
    case LinkProbeOutcome::kFailed:
      l.probe_failures = std::min(l.probe_failures + 1, kMaxProbeBackoff);
      l.next_probe_at = now + interval * l.probe_failures;
      break;
    case LinkProbeOutcome::kInconclusive:
      l.next_probe_at = now + interval;
      break;
  }
  return events;
}

}  // namespace narwhal::router
