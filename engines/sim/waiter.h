// Interruptible waits of one request: every pause of the simulator (latency,
// injected delays and silences) ends early when the client goes away or the
// engine stops, so no request outlives either. A wait blocks in ppoll() on
// the client's socket (peer hang-up) and the engine's stop signal: waiting
// costs no CPU however many requests wait.
#ifndef NARWHAL_ENGINES_SIM_WAITER_H_
#define NARWHAL_ENGINES_SIM_WAITER_H_

#include "absl/time/time.h"
#include "engines/sim/peer_socket.h"
#include "engines/sim/stop_signal.h"

namespace narwhal::sim {

enum class WaitEnd { kElapsed, kClientGone, kStopped };

class Waiter {
 public:
  // Upper bound of one ppoll() call (waits longer than this loop).
  static constexpr absl::Duration kMaxSlice = absl::Milliseconds(250);

  // `peer` may be invalid (then only the engine stopping ends a wait
  // early). `stop` must outlive this.
  Waiter(const StopSignal* stop, engines::PeerSocket peer) : stop_(stop), peer_(peer) {}

  // Waits `duration` (nothing for <= 0, but still reports a gone client or
  // a stopped engine).
  WaitEnd Sleep(absl::Duration duration) const;

 private:
  const StopSignal* stop_;
  engines::PeerSocket peer_;
};

}  // namespace narwhal::sim

#endif  // NARWHAL_ENGINES_SIM_WAITER_H_
