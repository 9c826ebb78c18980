// LegTimer: the one timer of an engine leg, on the leg's loop.
//
// A leg is bounded by one deadline at a time — connect, first token (B12),
// the silence between chunks (B13), the prefill bound, the request deadline —
// and records which one it is, so an expiry is classified by cause. Re-arming
// to a later deadline (every event, B13) only stores the new deadline: the
// pending wait wakes at the old one, sees the deadline moved and waits again,
// so a relayed frame costs no timer syscall. Pause() suspends expiry while a
// slow client back-pressures the stream. On expiry the `on_expire` callback
// runs once (it closes the leg's socket).
//
// Not thread-safe: used from the leg's loop only. Reads time from the
// injected Clock, so tests drive it on fake time.
#ifndef NARWHAL_ENGINES_HTTP_LEG_TIMER_H_
#define NARWHAL_ENGINES_HTTP_LEG_TIMER_H_

#include <functional>
#include <memory>

#include "engines/clock.h"

namespace narwhal::engines {

enum class LegBound { kNone, kConnect, kFirstToken, kRead, kLeg, kRequest };

class LegTimer {
 public:
  LegTimer(const Clock& clock, const Executor& executor, std::function<void()> on_expire);
  ~LegTimer();
  LegTimer(const LegTimer&) = delete;
  LegTimer& operator=(const LegTimer&) = delete;

  // Expires at `deadline` (MonoTime::max(): never) for `bound`, unless
  // re-armed, paused or stopped first.
  void Arm(MonoTime deadline, LegBound bound);
  // No expiry until the next Arm().
  void Pause() { deadline_ = MonoTime::max(); }
  // For good: no expiry after this.
  void Stop();

  bool fired() const { return fired_bound_ != LegBound::kNone; }
  // The bound that expired (kNone while none did).
  LegBound fired_bound() const { return fired_bound_; }
  LegBound armed_bound() const { return bound_; }

 private:
  void Wait();
  void OnWake(unsigned generation, bool fired);

  const Clock& clock_;
  std::unique_ptr<Timer> timer_;
  std::function<void()> on_expire_;
  MonoTime deadline_ = MonoTime::max();
  LegBound bound_ = LegBound::kNone;
  bool waiting_ = false;
  MonoTime waiting_until_ = MonoTime::max();
  bool stopped_ = false;
  unsigned generation_ = 0;  // of the latest wait; older completions are stale
  LegBound fired_bound_ = LegBound::kNone;
  // Guards callbacks that outlive the timer object.
  std::shared_ptr<LegTimer*> self_;
};

}  // namespace narwhal::engines

#endif  // NARWHAL_ENGINES_HTTP_LEG_TIMER_H_
