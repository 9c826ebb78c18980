#include "engines/sim/waiter.h"

#include <algorithm>

namespace narwhal::sim {

WaitEnd Waiter::Check() const {
  if (stop_->HasBeenNotified()) return WaitEnd::kStopped;
  if (peer_.PeerClosed()) return WaitEnd::kClientGone;
  return WaitEnd::kElapsed;
}

WaitEnd Waiter::Sleep(absl::Duration duration) const {
  const absl::Time deadline = absl::Now() + duration;
  for (;;) {
    const WaitEnd state = Check();
    if (state != WaitEnd::kElapsed) return state;
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return WaitEnd::kElapsed;
    if (stop_->WaitForNotificationWithTimeout(std::min(left, kPollInterval))) {
      return WaitEnd::kStopped;
    }
  }
}

}  // namespace narwhal::sim
