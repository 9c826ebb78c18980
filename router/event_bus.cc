#include "router/event_bus.h"

namespace narwhal::router {

nlohmann::json EventBus::Publish(nlohmann::json event) {
  std::vector<std::shared_ptr<Subscriber>> targets;
  {
    std::lock_guard<std::mutex> lock(mu_);
    event["seq"] = ++seq_;
    recent_.push_back(event);
    while (recent_.size() > history_) recent_.pop_front();
    for (auto& [id, s] : subscribers_) targets.push_back(s);
  }
  for (auto& s : targets) (*s)(event);
  return event;
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

std::vector<nlohmann::json> EventBus::Since(long long after) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<nlohmann::json> out;
  for (const nlohmann::json& e : recent_) {
    if (e.value("seq", 0LL) > after) out.push_back(e);
  }
  return out;
}

}  // namespace narwhal::router
