#include "engines/http/connection_pool.h"

#include <sys/socket.h>

#include <algorithm>

namespace narwhal::engines {
namespace {

// True when an idle connection is still usable: nothing to read (no EOF from
// the engine, no stray bytes) and no error on it.
bool LooksOpen(ConnectionPool::Socket& socket) {
  if (!socket.is_open()) return false;
  char byte;
  // A TLS connection the engine closed has its close_notify (or EOF) here.
  const ssize_t n = ::recv(socket.tcp().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

}  // namespace

std::optional<ConnectionPool::Socket> ConnectionPool::Take(const std::string& key, MonoTime now) {
  auto it = idle_.find(key);
  if (it == idle_.end()) return std::nullopt;
  std::deque<Idle>& list = it->second;
  // Most recently returned first: the warmest connection.
  while (!list.empty()) {
    Idle idle = std::move(list.back());
    list.pop_back();
    if (now - idle.since <= kMaxIdle && LooksOpen(idle.socket)) return std::move(idle.socket);
    idle.socket.Close();
  }
  return std::nullopt;
}

void ConnectionPool::Put(const std::string& key, Socket socket, const Clock& clock,
                         const Executor& executor, size_t max_idle) {
  const MonoTime now = clock.Now();
  std::deque<Idle>& list = idle_[key];
  // Drop the stale ones first (oldest at the front).
  while (!list.empty() && now - list.front().since > kMaxIdle) list.pop_front();
  if (list.size() >= max_idle) return;  // `socket` closes as it goes out of scope
  list.push_back(Idle{std::move(socket), now});
  if (!sweep_) sweep_ = clock.NewTimer(executor);
  if (!sweep_armed_) ArmSweep(clock, now + kMaxIdle);
}

void ConnectionPool::ArmSweep(const Clock& clock, MonoTime at) {
  sweep_armed_ = true;
  // The timer belongs to this service and dies with it (its completion is
  // then never run), so the callback may use `this`.
  sweep_->AsyncWait(at + std::chrono::milliseconds(10), [this, &clock](bool fired) {
    sweep_armed_ = false;
    if (fired) Sweep(clock);
  });
}

void ConnectionPool::Sweep(const Clock& clock) {
  const MonoTime now = clock.Now();
  MonoTime oldest = MonoTime::max();
  for (auto it = idle_.begin(); it != idle_.end();) {
    std::deque<Idle>& list = it->second;
    while (!list.empty() && now - list.front().since > kMaxIdle) list.pop_front();
    if (list.empty()) {
      it = idle_.erase(it);
      continue;
    }
    oldest = std::min(oldest, list.front().since);
    ++it;
  }
  if (oldest != MonoTime::max()) ArmSweep(clock, oldest + kMaxIdle);
}

const std::vector<boost::asio::ip::tcp::endpoint>* ConnectionPool::Endpoints(
    const std::string& key) const {
  auto it = endpoints_.find(key);
  return it == endpoints_.end() ? nullptr : &it->second;
}

void ConnectionPool::SetEndpoints(const std::string& key,
                                  std::vector<boost::asio::ip::tcp::endpoint> eps) {
  endpoints_[key] = std::move(eps);
}

size_t ConnectionPool::idle(const std::string& key) const {
  auto it = idle_.find(key);
  return it == idle_.end() ? 0 : it->second.size();
}

}  // namespace narwhal::engines
