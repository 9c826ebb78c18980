#include "engines/sim/kv_store.h"

#include <algorithm>

namespace narwhal::sim {

nlohmann::json KvEntry::ToJson() const {
  const char* state_name = state == KvState::kHeld       ? "held"
                           : state == KvState::kConsumed ? "consumed"
                           : state == KvState::kReleased ? "released"
                                                         : "expired";
  nlohmann::json json = {{"state", state_name},
                         {"remote_request_id", remote_request_id},
                         {"remote_block_ids", nlohmann::json::array()},
                         {"remote_num_tokens", num_tokens},
                         {"created_at", created_at},
                         {"expires_at", expires_at}};
  json["remote_block_ids"].push_back(block_ids);
  if (state == KvState::kConsumed || state == KvState::kReleased) {
    json[state == KvState::kConsumed ? "consumed_at" : "released_at"] = ended_at;
    json["consumer"] = {{"engine_id", consumer.engine_id},
                        {"request_id", consumer.request_id},
                        {"peer", consumer.peer}};
  } else if (state == KvState::kExpired) {
    json["expired_at"] = ended_at;
  }
  return json;
}

KvStore::KvStore(double lease_s, Clock clock) : lease_s_(lease_s), clock_(std::move(clock)) {}

KvEntry KvStore::Hold(std::string remote_request_id, int num_tokens) {
  const double now = clock_();
  absl::MutexLock lock(&mu_);
  ExpireDueLocked(now);
  while (held_.size() >= kMaxHeld && !order_.empty()) {
    const auto [expires_at, oldest] = order_.front();
    order_.pop_front();
    auto it = held_.find(oldest);
    if (it != held_.end() && it->second.expires_at == expires_at) {
      ExpireLocked(oldest, now);
    }
  }
  KvEntry entry;
  entry.remote_request_id = std::move(remote_request_id);
  entry.num_tokens = num_tokens;
  entry.created_at = now;
  entry.expires_at = now + lease_s_;
  const int tokens = std::max(num_tokens, 1);
  const int blocks = std::min(kMaxBlocksPerEntry, (tokens + kTokensPerBlock - 1) / kTokensPerBlock);
  for (int i = 0; i < blocks; ++i) {
    entry.block_ids.push_back(next_block_);
    next_block_ = next_block_ >= (1 << 30) ? 1 : next_block_ + 1;
  }
  // A repeated id replaces the entry it names (ids carry a random suffix, so
  // this only happens when a caller reuses one on purpose).
  held_[entry.remote_request_id] = entry;
  order_.emplace_back(entry.expires_at, entry.remote_request_id);
  return entry;
}

PullResult KvStore::Pull(absl::string_view remote_request_id, KvConsumer consumer) {
  const double now = clock_();
  absl::MutexLock lock(&mu_);
  ExpireDueLocked(now);
  return EndLocked(remote_request_id, std::move(consumer), KvState::kConsumed, now);
}

PullResult KvStore::Release(absl::string_view remote_request_id, KvConsumer consumer) {
  const double now = clock_();
  absl::MutexLock lock(&mu_);
  ExpireDueLocked(now);
  return EndLocked(remote_request_id, std::move(consumer), KvState::kReleased, now);
}

PullResult KvStore::EndLocked(absl::string_view remote_request_id, KvConsumer consumer, KvState to,
                              double now) {
  PullResult result;
  auto it = held_.find(std::string(remote_request_id));
  if (it != held_.end()) {
    KvEntry entry = std::move(it->second);
    held_.erase(it);
    entry.state = to;
    entry.ended_at = now;
    entry.consumer = std::move(consumer);
    Remember(to == KvState::kConsumed ? &consumed_ : &released_, entry);
    result.outcome = PullOutcome::kOk;
    result.entry = std::move(entry);
    return result;
  }
  if (const KvEntry* entry = Find(consumed_, remote_request_id)) {
    result.outcome = PullOutcome::kConsumed;
    result.entry = *entry;
  } else if (const KvEntry* entry = Find(released_, remote_request_id)) {
    result.outcome = PullOutcome::kReleased;
    result.entry = *entry;
  } else if (const KvEntry* entry = Find(expired_, remote_request_id)) {
    result.outcome = PullOutcome::kExpired;
    result.entry = *entry;
  }
  return result;
}

uint64_t KvStore::expired_total() {
  const double now = clock_();
  absl::MutexLock lock(&mu_);
  ExpireDueLocked(now);
  return expired_total_;
}

size_t KvStore::held_count() {
  const double now = clock_();
  absl::MutexLock lock(&mu_);
  ExpireDueLocked(now);
  return held_.size();
}

nlohmann::json KvStore::ToJson() {
  const double now = clock_();
  absl::MutexLock lock(&mu_);
  ExpireDueLocked(now);
  nlohmann::json json = {{"held", nlohmann::json::array()},
                         {"consumed", nlohmann::json::array()},
                         {"released", nlohmann::json::array()},
                         {"expired", nlohmann::json::array()}};
  for (const auto& [expires_at, id] : order_) {
    auto it = held_.find(id);
    if (it != held_.end() && it->second.expires_at == expires_at) {
      json["held"].push_back(it->second.ToJson());
    }
  }
  for (const KvEntry& entry : consumed_) {
    json["consumed"].push_back(entry.ToJson());
  }
  for (const KvEntry& entry : released_) {
    json["released"].push_back(entry.ToJson());
  }
  for (const KvEntry& entry : expired_) {
    json["expired"].push_back(entry.ToJson());
  }
  return json;
}

void KvStore::ExpireDueLocked(double now) {
  while (!order_.empty() && order_.front().first <= now) {
    const std::string id = order_.front().second;
    const double expires_at = order_.front().first;
    order_.pop_front();
    auto it = held_.find(id);
    if (it != held_.end() && it->second.expires_at == expires_at) {
      ExpireLocked(id, now);
    }
  }
}

void KvStore::ExpireLocked(const std::string& id, double now) {
  auto it = held_.find(id);
  if (it == held_.end()) return;
  KvEntry entry = std::move(it->second);
  held_.erase(it);
  entry.state = KvState::kExpired;
  entry.ended_at = now;
  Remember(&expired_, std::move(entry));
  ++expired_total_;
}

void KvStore::Remember(std::deque<KvEntry>* history, KvEntry entry) {
  history->push_back(std::move(entry));
  while (history->size() > kHistory) history->pop_front();
}

const KvEntry* KvStore::Find(const std::deque<KvEntry>& history, absl::string_view id) {
  for (auto it = history.rbegin(); it != history.rend(); ++it) {
    if (it->remote_request_id == id) return &*it;
  }
  return nullptr;
}

}  // namespace narwhal::sim
