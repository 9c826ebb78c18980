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
  if (fired_.load()) return;
  const int64_t t = Ticks(when);
  deadline_.store(t);
  // Fast path: an entry at or before `t` is already scheduled; when it comes
  // due the thread finds the new deadline and reschedules. (If the thread
  // dropped that entry meanwhile, it re-reads deadline_ after publishing
  // scheduled_ = kNever, so this store is never lost.)
  if (t >= scheduled_.load()) return;
  LegWatchdog& w = *owner_;
  std::lock_guard<std::mutex> lock(w.mu_);
  if (fired_.load() || t >= scheduled_.load()) return;
  const bool earliest = w.heap_.empty() || t < w.heap_.top().when;
  scheduled_.store(t);
  w.heap_.push(Entry{t, weak_from_this()});
  if (earliest) w.cv_.notify_one();
}

void LegWatchdog::Timer::Disarm() {
  deadline_.store(kNever);
  LegWatchdog& w = *owner_;
  std::unique_lock<std::mutex> lock(w.mu_);
  w.done_cv_.wait(lock, [&] { return w.running_ != this; });
}

bool LegWatchdog::Timer::fired() const { return fired_.load(); }

void LegWatchdog::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    if (heap_.empty()) {
      cv_.wait(lock);
      continue;
    }
    const int64_t next = heap_.top().when;
    const int64_t now = Timer::Ticks(MonoClock::now());
    if (now < next) {
      cv_.wait_until(lock, MonoTime(MonoClock::duration(next)));
      continue;
    }
    Entry entry = heap_.top();
    heap_.pop();
    std::shared_ptr<Timer> timer = entry.timer.lock();
    if (!timer || timer->fired_.load() || entry.when != timer->scheduled_.load()) continue;
    int64_t deadline = timer->deadline_.load();
    if (deadline == Timer::kNever) {  // disarmed (or paused)
      timer->scheduled_.store(Timer::kNever);
      // A concurrent ArmAt may have taken its fast path just before the
      // store above: re-read so its deadline is not lost.
      deadline = timer->deadline_.load();
      if (deadline == Timer::kNever) continue;
    }
    if (deadline > now) {  // re-armed later: reschedule
      timer->scheduled_.store(deadline);
      heap_.push(Entry{deadline, timer});
      continue;
    }
    timer->fired_.store(true);
    timer->scheduled_.store(Timer::kNever);
    running_ = timer.get();
    lock.unlock();
    timer->on_fire_();
    lock.lock();
    running_ = nullptr;
    done_cv_.notify_all();
  }
}

}  // namespace narwhal::engines
