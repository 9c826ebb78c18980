#include "engines/http/leg_timer.h"

namespace narwhal::engines {

LegTimer::LegTimer(const Clock& clock, const Executor& executor, std::function<void()> on_expire)
    : clock_(clock),
      timer_(clock.NewTimer(executor)),
      on_expire_(std::move(on_expire)),
      self_(std::make_shared<LegTimer*>(this)) {}

LegTimer::~LegTimer() {
  *self_ = nullptr;  // a completion still queued finds no timer
  timer_->Cancel();
}

void LegTimer::Arm(MonoTime deadline, LegBound bound) {
  if (stopped_ || fired()) return;
  deadline_ = deadline;
  bound_ = bound;
  if (deadline_ == MonoTime::max()) return;
  // A pending wait that wakes no later than the new deadline will re-wait;
  // only an earlier deadline needs the wait replaced.
  if (waiting_ && waiting_until_ <= deadline_) return;
  Wait();
}

void LegTimer::Stop() {
  stopped_ = true;
  deadline_ = MonoTime::max();
  if (waiting_) timer_->Cancel();
}

void LegTimer::Wait() {
  waiting_ = true;
  waiting_until_ = deadline_;
  const unsigned generation = ++generation_;
  std::weak_ptr<LegTimer*> weak = self_;
  timer_->AsyncWait(deadline_, [weak, generation](bool fired) {
    std::shared_ptr<LegTimer*> self = weak.lock();
    if (self && *self != nullptr) (*self)->OnWake(generation, fired);
  });
}

void LegTimer::OnWake(unsigned generation, bool fired) {
  if (generation != generation_) return;  // replaced by a later wait
  waiting_ = false;
  if (!fired || stopped_ || deadline_ == MonoTime::max()) return;
  if (clock_.Now() < deadline_) {
    Wait();  // re-armed to a later deadline meanwhile
    return;
  }
  fired_bound_ = bound_;
  if (on_expire_) on_expire_();
}

}  // namespace narwhal::engines
