// EventBus: fleet events (holds, ejections, probes, readmissions, preflight,
// membership) fanned out to live watchers (the admin WatchEvents stream) and
// kept in a bounded history. Each event stays typed (a FleetEvent with its
// `seq` and `at`) until an edge turns it into its wire form: the admin
// mappers into Event messages, PublishedEventJson into the JSON the journal
// and history readers carry. Thread-safe.
//
// Two kinds of listeners:
// - Subscribers: in-process callbacks (counters, tests). They run on the
//   publishing thread, outside the bus lock, and must not block.
// - Watchers: buffered consumers on other threads (one per WatchEvents
//   stream). Publishing appends the event to each watcher's buffer and wakes
//   it; the watcher pops at its own pace. Both their number and each one's
//   buffer are bounded (WatchLimits): Watch() refuses a watcher beyond the
//   cap, and a watcher whose buffer would pass its bound in bytes (or
//   events) overflows instead — its buffer is emptied, it takes nothing
//   more, and its owner ends it — so a watcher that never reads costs at
//   most its bound, never more. Events are immutable and shared between the
//   history and every buffer that holds them; a buffer is charged
//   ChargedBytes() per event all the same, so the bound holds whatever the
//   others do. Refusals and overflows are counted (watch_stats()).
#ifndef NARWHAL_ROUTER_FLEET_EVENT_BUS_H_
#define NARWHAL_ROUTER_FLEET_EVENT_BUS_H_

#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "router/fleet/fleet_event.h"

namespace narwhal::router {

// One published event: the bus's sequence number, its wall time (unix
// seconds) and the typed event.
struct PublishedEvent {
  long long seq = 0;
  double at = 0;
  FleetEvent event;
};

// Its wire form: FleetEventJson(event, at) with `seq`.
nlohmann::json PublishedEventJson(const PublishedEvent& e);

// Bounds of Watch(), chosen by the bus's consumer (the admin service).
struct WatchLimits {
  // Watchers open at once; one more is refused.
  size_t max_watchers = 64;
  // Bytes one watcher's buffer may hold (ChargedBytes per event).
  size_t buffer_bytes = 1 << 20;
  // Events one watcher's buffer may hold; 0 = bounded by bytes only.
  size_t buffer_events = 0;
};

class EventBus {
 public:
  using Subscriber = std::function<void(const PublishedEvent& event)>;
  using SharedEvent = std::shared_ptr<const PublishedEvent>;

  // A bounded buffer of published events for one consumer (Watch()).
  class Watcher {
   public:
    Watcher(const WatchLimits& limits, std::function<void()> wake);
    Watcher(const Watcher&) = delete;
    Watcher& operator=(const Watcher&) = delete;

    // The oldest buffered event; false when the buffer is empty.
    bool TryPop(SharedEvent* out);
    // The buffer passed its bound: it was emptied and takes nothing more.
    bool overflowed() const;
    // Close() was called.
    bool closed() const;
    // Ends the watcher from its owner's side (e.g. shutdown): empties the
    // buffer, takes nothing more, wakes the consumer. Idempotent.
    void Close();

    // What the buffer holds now (ChargedBytes of each event) and the most it
    // ever held; both stay within bound_bytes().
    size_t buffered_bytes() const;
    size_t peak_bytes() const;
    size_t buffered_events() const;
    size_t bound_bytes() const { return limits_.buffer_bytes; }
    size_t bound_events() const { return limits_.buffer_events; }
    // Events published to this watcher that it will never see (emptied at
    // the overflow, or arriving after it).
    long long dropped() const;

   private:
    friend class EventBus;
    // Appends `event`, or overflows; true when this push overflowed it.
    // `wake` is set when the consumer must be woken.
    bool Push(const SharedEvent& event, size_t bytes, bool* wake);
    void Wake() const;

    const WatchLimits limits_;
    const std::function<void()> wake_;
    mutable std::mutex mu_;
    std::deque<std::pair<SharedEvent, size_t>> buffer_;
    size_t bytes_ = 0;
    size_t peak_bytes_ = 0;
    long long dropped_ = 0;
    bool overflowed_ = false;
    bool closed_ = false;
  };

  struct WatchStats {
    size_t open = 0;           // watchers now
    long long refused = 0;     // Watch() calls refused at the cap
    long long overflowed = 0;  // watchers whose buffer overflowed
  };

  explicit EventBus(size_t history = 1000) : history_(history) {}

  // Stamps the next `seq` and publishes `event`, which happened at `at`
  // (unix seconds). Returns the published event.
  SharedEvent Publish(FleetEvent event, double at);
  int Subscribe(Subscriber subscriber);
  void Unsubscribe(int id);

  // A new watcher, bounded by `limits`; `wake` runs (on a publishing thread,
  // outside every bus lock; it must not block) after each event it buffers,
  // at its overflow and at Close(). Null, counted as refused, when
  // `limits.max_watchers` watchers are open. Unwatch() releases its place.
  std::shared_ptr<Watcher> Watch(const WatchLimits& limits, std::function<void()> wake);
  void Unwatch(const std::shared_ptr<Watcher>& watcher);
  WatchStats watch_stats() const;

  // Events with seq > `after`, oldest first (bounded by the history): their
  // wire forms, and the events themselves.
  std::vector<nlohmann::json> Since(long long after) const;
  std::vector<SharedEvent> SharedSince(long long after) const;

  // What a watcher's buffer is charged for `event`: its wire form's text
  // plus a fixed per-entry overhead.
  static size_t ChargedBytes(const PublishedEvent& event);

 private:
  const size_t history_;
  mutable std::mutex mu_;
  std::deque<SharedEvent> recent_;
  std::map<int, std::shared_ptr<Subscriber>> subscribers_;
  std::set<std::shared_ptr<Watcher>> watchers_;
  long long seq_ = 0;
  int next_id_ = 1;
  long long refused_ = 0;
  long long overflowed_ = 0;
};

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_FLEET_EVENT_BUS_H_
