#include "router/fleet/event_bus.h"

#include <algorithm>
#include <utility>

namespace narwhal::router {
namespace {

// A buffer entry beyond the event's text: the shared pointer and its byte
// count, and the deque's share of a block.
constexpr size_t kEntryOverhead = 64;

}  // namespace

nlohmann::json PublishedEventJson(const PublishedEvent& e) {
  nlohmann::json j = FleetEventJson(e.event, e.at);
  j["seq"] = e.seq;
  return j;
}

// ------------------------------------------------------------------ Watcher

EventBus::Watcher::Watcher(const WatchLimits& limits, std::function<void()> wake)
    : limits_(limits), wake_(std::move(wake)) {}

bool EventBus::Watcher::Push(const SharedEvent& event, size_t bytes, bool* wake) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_ || overflowed_) {
    ++dropped_;
    return false;
  }
  const bool too_many = limits_.buffer_events > 0 && buffer_.size() >= limits_.buffer_events;
  if (too_many || bytes > limits_.buffer_bytes || bytes_ > limits_.buffer_bytes - bytes) {
    overflowed_ = true;
    dropped_ += static_cast<long long>(buffer_.size()) + 1;
    std::deque<std::pair<SharedEvent, size_t>>().swap(buffer_);  // frees the blocks too
    bytes_ = 0;
    *wake = true;
    return true;
  }
  buffer_.emplace_back(event, bytes);
  bytes_ += bytes;
  peak_bytes_ = std::max(peak_bytes_, bytes_);
  *wake = true;
  return false;
}

void EventBus::Watcher::Wake() const {
  if (wake_) wake_();
}

bool EventBus::Watcher::TryPop(SharedEvent* out) {
  std::lock_guard<std::mutex> lock(mu_);
  if (buffer_.empty()) return false;
  *out = std::move(buffer_.front().first);
  bytes_ -= buffer_.front().second;
  buffer_.pop_front();
  return true;
}

bool EventBus::Watcher::overflowed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return overflowed_;
}

bool EventBus::Watcher::closed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return closed_;
}

void EventBus::Watcher::Close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return;
    closed_ = true;
    std::deque<std::pair<SharedEvent, size_t>>().swap(buffer_);
    bytes_ = 0;
  }
  Wake();
}

size_t EventBus::Watcher::buffered_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

size_t EventBus::Watcher::peak_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_bytes_;
}

size_t EventBus::Watcher::buffered_events() const {
  std::lock_guard<std::mutex> lock(mu_);
  return buffer_.size();
}

long long EventBus::Watcher::dropped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dropped_;
}

// ------------------------------------------------------------------ EventBus

size_t EventBus::ChargedBytes(const PublishedEvent& event) {
  return PublishedEventJson(event)
             .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
             .size() +
         kEntryOverhead;
}

EventBus::SharedEvent EventBus::Publish(FleetEvent event, double at) {
  std::vector<std::shared_ptr<Subscriber>> targets;
  std::vector<std::shared_ptr<Watcher>> woken;
  SharedEvent shared;
  {
    std::lock_guard<std::mutex> lock(mu_);
    shared = std::make_shared<const PublishedEvent>(PublishedEvent{++seq_, at, std::move(event)});
    recent_.push_back(shared);
    while (recent_.size() > history_) recent_.pop_front();
    for (auto& [id, s] : subscribers_) targets.push_back(s);
    // Appended under the bus lock, so every watcher sees events in seq order.
    if (!watchers_.empty()) {
      const size_t bytes = ChargedBytes(*shared);
      for (const std::shared_ptr<Watcher>& w : watchers_) {
        bool wake = false;
        if (w->Push(shared, bytes, &wake)) ++overflowed_;
        if (wake) woken.push_back(w);
      }
    }
  }
  for (const auto& w : woken) w->Wake();
  for (auto& s : targets) (*s)(*shared);
  return shared;
}

int EventBus::Subscribe(Subscriber subscriber) {
  std::lock_guard<std::mutex> lock(mu_);
  const int id = next_id_++;
  subscribers_[id] = std::make_shared<Subscriber>(std::move(subscriber));
  return id;
}

void EventBus::Unsubscribe(int id) {
  std::lock_guard<std::mutex> lock(mu_);
  subscribers_.erase(id);
}

std::shared_ptr<EventBus::Watcher> EventBus::Watch(const WatchLimits& limits,
                                                   std::function<void()> wake) {
  std::lock_guard<std::mutex> lock(mu_);
  if (watchers_.size() >= limits.max_watchers) {
    ++refused_;
    return nullptr;
  }
  auto watcher = std::make_shared<Watcher>(limits, std::move(wake));
  watchers_.insert(watcher);
  return watcher;
}

void EventBus::Unwatch(const std::shared_ptr<Watcher>& watcher) {
  std::lock_guard<std::mutex> lock(mu_);
  watchers_.erase(watcher);
}

EventBus::WatchStats EventBus::watch_stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  WatchStats stats;
  stats.open = watchers_.size();
  stats.refused = refused_;
  stats.overflowed = overflowed_;
  return stats;
}

std::vector<nlohmann::json> EventBus::Since(long long after) const {
  std::vector<nlohmann::json> out;
  for (const SharedEvent& e : SharedSince(after)) out.push_back(PublishedEventJson(*e));
  return out;
}

std::vector<EventBus::SharedEvent> EventBus::SharedSince(long long after) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<SharedEvent> out;
  for (const SharedEvent& e : recent_) {
    if (e->seq > after) out.push_back(e);
  }
  return out;
}

}  // namespace narwhal::router
