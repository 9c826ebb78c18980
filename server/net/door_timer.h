// DoorTimer: the one timer of a client connection, on the connection's loop.
//
// A connection is bounded by one deadline at a time — its TLS handshake,
// the wait for a request's first byte (new connection or keep-alive idle), the rest of its
// headers, its body, the write of a response or stream chunk, the lingering
// close — and the timer records which one, so an expiry is reported by cause.
// Re-arming to a later deadline only stores it: the pending wait wakes at the
// old one, sees the deadline moved and waits again, so a request or a relayed
// frame costs no timer syscall. On expiry `on_expire` runs once (it closes
// the socket, or cancels its operations, which ends whatever was waiting).
//
// Not thread-safe: used from the connection's loop only. Reads time from the
// injected Clock.
#ifndef NARWHAL_SERVER_NET_DOOR_TIMER_H_
#define NARWHAL_SERVER_NET_DOOR_TIMER_H_

#include <functional>
#include <memory>

#include "engines/clock.h"

namespace narwhal::server {

enum class DoorBound { kNone, kHandshake, kIdle, kHeader, kBody, kWrite, kLinger };

class DoorTimer {
 public:
  DoorTimer(const engines::Clock& clock, const engines::Executor& executor,
            std::function<void()> on_expire);
  ~DoorTimer();
  DoorTimer(const DoorTimer&) = delete;
  DoorTimer& operator=(const DoorTimer&) = delete;

  // Expires at `deadline` for `bound` unless re-armed or paused first.
  void Arm(engines::MonoTime deadline, DoorBound bound);
  // No expiry until the next Arm().
  void Pause() { deadline_ = engines::MonoTime::max(); }

  bool fired() const { return fired_bound_ != DoorBound::kNone; }
  // Forgets an expiry that left the socket open (the header bound: see
  // ClientSocket), so the timer bounds what answers it.
  void ClearExpiry() { fired_bound_ = DoorBound::kNone; }
  DoorBound fired_bound() const { return fired_bound_; }

 private:
  void Wait();
  void OnWake(unsigned generation, bool fired);

  const engines::Clock& clock_;
  std::unique_ptr<engines::Timer> timer_;
  std::function<void()> on_expire_;
  engines::MonoTime deadline_ = engines::MonoTime::max();
  DoorBound bound_ = DoorBound::kNone;
  bool waiting_ = false;
  engines::MonoTime waiting_until_ = engines::MonoTime::max();
  unsigned generation_ = 0;  // of the latest wait; older completions are stale
  DoorBound fired_bound_ = DoorBound::kNone;
  // Lets a completion that outlives the timer find it gone.
  std::shared_ptr<DoorTimer*> self_;
};

}  // namespace narwhal::server

#endif  // NARWHAL_SERVER_NET_DOOR_TIMER_H_
