// EventBus: fleet events (holds, ejections, probes, readmissions, preflight)
// fanned out to live watchers (the admin WatchEvents stream) and kept in a
// bounded history. Each event is a JSON object with `seq`, `at` (unix
// seconds), `event` (its kind) and kind-specific fields. Thread-safe;
// subscribers run on the publishing thread, outside the bus lock, and must
// not block.
#ifndef NARWHAL_ROUTER_EVENT_BUS_H_
#define NARWHAL_ROUTER_EVENT_BUS_H_

#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <vector>

#include <nlohmann/json.hpp>

namespace narwhal::router {

class EventBus {
 public:
  using Subscriber = std::function<void(const nlohmann::json& event)>;

  explicit EventBus(size_t history = 1000) : history_(history) {}

  // Stamps `seq` and publishes. Returns the stamped event.
  nlohmann::json Publish(nlohmann::json event);
  int Subscribe(Subscriber subscriber);
  void Unsubscribe(int id);
  // Events with seq > `after`, oldest first (bounded by the history).
  std::vector<nlohmann::json> Since(long long after) const;

 private:
  const size_t history_;
  mutable std::mutex mu_;
  std::deque<nlohmann::json> recent_;
  std::map<int, std::shared_ptr<Subscriber>> subscribers_;
  long long seq_ = 0;
  int next_id_ = 1;
};

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_EVENT_BUS_H_
