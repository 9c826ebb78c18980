#include "engines/leg_watchdog.h"

namespace narwhal::engines {

LegWatchdog::LegWatchdog() : thread_([this] { Run(); }) {}

LegWatchdog::~LegWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::shared_ptr<LegWatchdog::Timer> LegWatchdog::NewTimer(std::function<void()> on_fire) {
  return std::shared_ptr<Timer>(new Timer(this, std::move(on_fire)));
}

void LegWatchdog::Timer::ArmAt(MonoTime when) {
  LegWatchdog& w = *owner_;
  std::lock_guard<std::mutex> lock(w.mu_);
  if (fired_) return;
  deadline_ = when;
  if (when < scheduled_) {
    const bool earliest = w.heap_.empty() || when < w.heap_.top().when;
    scheduled_ = when;
    w.heap_.push(Entry{when, weak_from_this()});
    if (earliest) w.cv_.notify_one();
  }
}

void LegWatchdog::Timer::Disarm() {
  LegWatchdog& w = *owner_;
  std::unique_lock<std::mutex> lock(w.mu_);
  deadline_ = MonoTime::max();
  w.done_cv_.wait(lock, [&] { return w.running_ != this; });
}

bool LegWatchdog::Timer::fired() const {
  std::lock_guard<std::mutex> lock(owner_->mu_);
  return fired_;
}

void LegWatchdog::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    if (heap_.empty()) {
      cv_.wait(lock);
      continue;
    }
    const MonoTime next = heap_.top().when;
    if (MonoClock::now() < next) {
      cv_.wait_until(lock, next);
      continue;
    }
    Entry entry = heap_.top();
    heap_.pop();
    std::shared_ptr<Timer> timer = entry.timer.lock();
    if (!timer || timer->fired_ || entry.when != timer->scheduled_) continue;  // dead or stale
    if (timer->deadline_ == MonoTime::max()) {  // disarmed
      timer->scheduled_ = MonoTime::max();
      continue;
    }
    if (timer->deadline_ > MonoClock::now()) {  // re-armed later: reschedule
      timer->scheduled_ = timer->deadline_;
      heap_.push(Entry{timer->deadline_, timer});
      continue;
    }
    timer->fired_ = true;
    timer->scheduled_ = MonoTime::max();
    running_ = timer.get();
    lock.unlock();
    timer->on_fire_();
    lock.lock();
    running_ = nullptr;
    done_cv_.notify_all();
  }
}

}  // namespace narwhal::engines
