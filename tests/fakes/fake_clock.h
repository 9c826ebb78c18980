// FakeClock: a router::Clock whose time moves only when a test (or a fake
// engine modelling latency) says so.
//
// Now() starts at the real steady-clock reading taken at construction, so
// deadlines computed from it stay meaningful to code that waits on the real
// steady clock (ResponseChannel::Push), and then moves only through Advance(),
// SetNow() and SleepFor(). SleepFor() returns at once after advancing the fake
// time and records every requested duration, so tests assert backoff bounds
// without sleeping. Thread-safe: the router calls it from worker threads.
#ifndef NARWHAL_TESTS_FAKES_FAKE_CLOCK_H_
#define NARWHAL_TESTS_FAKES_FAKE_CLOCK_H_

#include <functional>
#include <mutex>
#include <utility>
#include <vector>

#include "engines/api.h"
#include "engines/cancel_token.h"
#include "router/clock.h"

namespace narwhal::testing {

class FakeClock : public router::Clock {
 public:
  using Duration = engines::MonoClock::duration;

  explicit FakeClock(engines::MonoTime start = engines::MonoClock::now(),
                     double wall_start = 1.7e9)
      : now_(start), wall_(wall_start) {}

  engines::MonoTime Now() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return now_;
  }

  double WallNow() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return wall_;
  }

  // Records `d`, runs the sleep hook (if any), then advances the fake time by
  // `d` and returns true — or returns false without advancing when `cancel`
  // has fired (before the call or inside the hook).
  bool SleepFor(Duration d, engines::CancelToken* cancel) const override {
    std::function<void(Duration)> hook;
    {
      std::lock_guard<std::mutex> lock(mu_);
      sleeps_.push_back(d);
      hook = sleep_hook_;
    }
    if (hook) hook(d);
    if (cancel != nullptr && cancel->cancelled()) return false;
    std::lock_guard<std::mutex> lock(mu_);
    now_ += d;
    wall_ += engines::Seconds(d);
    return true;
  }

  // Moves monotonic and wall time forward together.
  void Advance(Duration d) {
    std::lock_guard<std::mutex> lock(mu_);
    now_ += d;
    wall_ += engines::Seconds(d);
  }
  void SetNow(engines::MonoTime t) {
    std::lock_guard<std::mutex> lock(mu_);
    now_ = t;
  }
  void SetWallNow(double unix_seconds) {
    std::lock_guard<std::mutex> lock(mu_);
    wall_ = unix_seconds;
  }

  // Every duration SleepFor() was asked for, in call order.
  std::vector<Duration> sleeps() const {
    std::lock_guard<std::mutex> lock(mu_);
    return sleeps_;
  }

  // Runs inside SleepFor(), on the sleeping thread, before the cancel check:
  // lets a test act "during" a backoff (e.g. the client goes away).
  void SetSleepHook(std::function<void(Duration)> hook) {
    std::lock_guard<std::mutex> lock(mu_);
    sleep_hook_ = std::move(hook);
  }

 private:
  mutable std::mutex mu_;
  mutable engines::MonoTime now_;
  mutable double wall_;
  mutable std::vector<Duration> sleeps_;
  std::function<void(Duration)> sleep_hook_;
};

}  // namespace narwhal::testing

#endif  // NARWHAL_TESTS_FAKES_FAKE_CLOCK_H_
