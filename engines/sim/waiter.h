// Interruptible waits of one request: every pause of the simulator (latency,
// injected delays and silences) ends early when the client goes away or the
// engine stops, so no request outlives either.
#ifndef NARWHAL_ENGINES_SIM_WAITER_H_
#define NARWHAL_ENGINES_SIM_WAITER_H_

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "engines/peer_socket.h"

namespace narwhal::sim {

enum class WaitEnd { kElapsed, kClientGone, kStopped };

class Waiter {
 public:
  // How often the peer socket is checked while waiting.
  static constexpr absl::Duration kPollInterval = absl::Milliseconds(10);

  // `stop` is notified when the engine stops; `peer` may be invalid (then
  // only the engine stopping ends a wait early). `stop` must outlive this.
  Waiter(const absl::Notification* stop, engines::PeerSocket peer)
      : stop_(stop), peer_(peer) {}

  // Waits `duration` (nothing for <= 0, but still reports a gone client or
  // a stopped engine).
  WaitEnd Sleep(absl::Duration duration) const;

  // The current state without waiting.
  WaitEnd Check() const;

  const engines::PeerSocket& peer() const { return peer_; }

 private:
  const absl::Notification* stop_;
  engines::PeerSocket peer_;
};

}  // namespace narwhal::sim

#endif  // NARWHAL_ENGINES_SIM_WAITER_H_
