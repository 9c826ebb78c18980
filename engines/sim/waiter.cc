#include "engines/sim/waiter.h"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <ctime>

#include "absl/time/clock.h"

namespace narwhal::sim {

WaitEnd Waiter::Sleep(absl::Duration duration) const {
  const absl::Time deadline = absl::Now() + duration;
  for (;;) {
    if (stop_->HasBeenNotified()) return WaitEnd::kStopped;
    const absl::Duration left = std::max(absl::ZeroDuration(), deadline - absl::Now());
    const timespec slice = absl::ToTimespec(std::min(left, kMaxSlice));
    // POLLRDHUP: the peer shut its side; data it may have pipelined does
    // not wake the wait. POLLHUP / POLLERR are always reported.
    pollfd fds[2] = {{peer_.fd(), POLLRDHUP, 0}, {stop_->fd(), POLLIN, 0}};
    const int n = ppoll(fds, 2, &slice, nullptr);
    if (n > 0) {
      if (fds[1].revents != 0) return WaitEnd::kStopped;
      if (fds[0].revents != 0) return WaitEnd::kClientGone;
    } else if (n < 0 && errno != EINTR) {
      // Not expected with valid arguments; keep the wait bounded anyway.
      absl::SleepFor(std::min(left, kMaxSlice));
    }
    if (absl::Now() >= deadline) return WaitEnd::kElapsed;
  }
}

}  // namespace narwhal::sim
