// A one-shot "the engine is stopping" signal that waits can poll together
// with a socket: an eventfd that becomes readable, for good, on Notify().
#ifndef NARWHAL_ENGINES_SIM_STOP_SIGNAL_H_
#define NARWHAL_ENGINES_SIM_STOP_SIGNAL_H_

#include <atomic>

namespace narwhal::sim {

class StopSignal {
 public:
  StopSignal();
  ~StopSignal();
  StopSignal(const StopSignal&) = delete;
  StopSignal& operator=(const StopSignal&) = delete;

  // Idempotent; thread-safe.
  void Notify();
  bool HasBeenNotified() const { return notified_.load(); }
  // Readable once notified (-1 if no eventfd could be made; waits then
  // check HasBeenNotified() between bounded slices).
  int fd() const { return fd_; }

 private:
  const int fd_;
  std::atomic<bool> notified_{false};
};

}  // namespace narwhal::sim

#endif  // NARWHAL_ENGINES_SIM_STOP_SIGNAL_H_
