#include "server/http/connection_tracker.h"

#include <utility>
#include <vector>

#include <boost/asio/post.hpp>

#include "server/net/client_socket.h"

namespace narwhal::server {

uint64_t ConnectionTracker::Add(std::weak_ptr<ClientSocket> socket, engines::Executor executor,
                                bool reserve) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_) return 0;
  const uint64_t id = next_id_++;
  connections_.emplace(id, Entry{std::move(socket), std::move(executor), reserve});
  if (reserve) ++reserve_;
  Publish();
  return id;
}

void ConnectionTracker::Remove(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = connections_.find(id);
  if (it == connections_.end()) return;
  if (it->second.reserve) --reserve_;
  connections_.erase(it);
  Publish();
  if (connections_.empty()) cv_.notify_all();
}

void ConnectionTracker::Publish() {
  open_.store(static_cast<int>(connections_.size()) - reserve_, std::memory_order_relaxed);
  reserve_open_.store(reserve_, std::memory_order_relaxed);
}

void ConnectionTracker::StopAll() {
  std::vector<Entry> entries;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    for (const auto& [id, entry] : connections_) entries.push_back(entry);
  }
  for (Entry& entry : entries) {
    boost::asio::post(entry.executor, [weak = std::move(entry.socket)] {
      if (std::shared_ptr<ClientSocket> socket = weak.lock()) socket->Close();
    });
  }
}

bool ConnectionTracker::stopping() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stopping_;
}

void ConnectionTracker::WaitNoneOpen() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return connections_.empty(); });
}

void ConnectionTracker::BeginResponse() {
  std::lock_guard<std::mutex> lock(mu_);
  ++responses_;
}

void ConnectionTracker::EndResponse() {
  std::lock_guard<std::mutex> lock(mu_);
  if (--responses_ == 0) cv_.notify_all();
}

bool ConnectionTracker::WaitIdle(engines::MonoTime deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_until(lock, deadline, [this] { return responses_ == 0; });
}

}  // namespace narwhal::server
