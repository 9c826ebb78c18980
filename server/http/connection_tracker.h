// ConnectionTracker: what the HTTP door has open — its client connections
// (for serving.max_connections and for closing them all on shutdown) and its
// generation responses in progress (for the graceful drain).
//
// Thread-safe. Connections register from the accept loop and leave from
// their own loops; StopAll() and the waits are called from the thread that
// shuts the door down (never from a loop thread: the waits block).
#ifndef NARWHAL_SERVER_HTTP_CONNECTION_TRACKER_H_
#define NARWHAL_SERVER_HTTP_CONNECTION_TRACKER_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "engines/api.h"
#include "engines/clock.h"

namespace narwhal::server {

class ClientSocket;

class ConnectionTracker {
 public:
  // Registers an open connection whose socket lives on `executor` — with
  // `reserve`, one of the door's reserve beyond serving.max_connections
  // (server/http/connection.h) — and returns its id, or 0 once StopAll() ran
  // (the caller closes the connection).
  uint64_t Add(std::weak_ptr<ClientSocket> socket, engines::Executor executor,
               bool reserve = false);
  void Remove(uint64_t id);
  // Open connections, the reserve's apart.
  int open() const { return open_.load(std::memory_order_relaxed); }
  int reserve_open() const { return reserve_open_.load(std::memory_order_relaxed); }

  // Refuses new connections and closes every open one (on its own loop).
  void StopAll();
  bool stopping() const;
  // Blocks until no connection is open.
  void WaitNoneOpen();

  // A generation response starts / has been written to its end.
  void BeginResponse();
  void EndResponse();
  // Blocks until no generation response is in progress, at most until
  // `deadline` (steady clock). False on timeout.
  bool WaitIdle(engines::MonoTime deadline);

 private:
  // Updates the counters from connections_ (under mu_).
  void Publish();

  struct Entry {
    std::weak_ptr<ClientSocket> socket;
    engines::Executor executor;
    bool reserve = false;
  };

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, Entry> connections_;
  uint64_t next_id_ = 1;
  bool stopping_ = false;
  int responses_ = 0;
  std::atomic<int> open_{0};
  std::atomic<int> reserve_open_{0};
  int reserve_ = 0;  // under mu_
};

}  // namespace narwhal::server

#endif  // NARWHAL_SERVER_HTTP_CONNECTION_TRACKER_H_
