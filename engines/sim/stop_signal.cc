#include "engines/sim/stop_signal.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdint>

namespace narwhal::sim {

StopSignal::StopSignal() : fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}

StopSignal::~StopSignal() {
  if (fd_ >= 0) close(fd_);
}

void StopSignal::Notify() {
  if (notified_.exchange(true)) return;
  if (fd_ >= 0) {
    const uint64_t one = 1;
    // Never read back: the descriptor stays readable.
    [[maybe_unused]] const ssize_t n = write(fd_, &one, sizeof(one));
  }
}

}  // namespace narwhal::sim
