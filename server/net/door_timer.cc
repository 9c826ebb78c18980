#include "server/net/door_timer.h"

namespace narwhal::server {

DoorTimer::DoorTimer(const engines::Clock& clock, const engines::Executor& executor,
                     std::function<void()> on_expire)
    : clock_(clock),
      timer_(clock.NewTimer(executor)),
      on_expire_(std::move(on_expire)),
      self_(std::make_shared<DoorTimer*>(this)) {}

DoorTimer::~DoorTimer() {
  *self_ = nullptr;  // a completion still queued finds no timer
  timer_->Cancel();
}

void DoorTimer::Arm(engines::MonoTime deadline, DoorBound bound) {
  if (fired()) return;
  deadline_ = deadline;
  bound_ = bound;
  if (deadline_ == engines::MonoTime::max()) return;
  // A pending wait that wakes no later than the new deadline re-waits on its
  // own; only an earlier deadline needs the wait replaced.
  if (waiting_ && waiting_until_ <= deadline_) return;
  Wait();
}

void DoorTimer::Wait() {
  waiting_ = true;
  waiting_until_ = deadline_;
  const unsigned generation = ++generation_;
  std::weak_ptr<DoorTimer*> weak = self_;
  timer_->AsyncWait(deadline_, [weak, generation](bool fired) {
    std::shared_ptr<DoorTimer*> self = weak.lock();
    if (self && *self != nullptr) (*self)->OnWake(generation, fired);
  });
}

void DoorTimer::OnWake(unsigned generation, bool fired) {
  if (generation != generation_) return;  // replaced by a later wait
  waiting_ = false;
  if (!fired || deadline_ == engines::MonoTime::max()) return;
  if (clock_.Now() < deadline_) {
    Wait();  // re-armed to a later deadline meanwhile
    return;
  }
  fired_bound_ = bound_;
  if (on_expire_) on_expire_();
}

}  // namespace narwhal::server
