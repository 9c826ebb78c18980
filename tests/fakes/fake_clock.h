// FakeClock: a clock whose time moves only when a test (or a fake engine
// modelling latency) says so. It is both the router's clock and the engine
// layer's (engines/clock.h): its timers complete — posted to their loops —
// when Advance() moves time past their deadline, so the data plane's timers
// (B12/B13, deadlines) run on fake time without sleeping.
//
// Now() starts at the real steady-clock reading taken at construction, so
// deadlines computed from it stay meaningful to code that waits on the real
// steady clock (ResponseChannel::Push), and then moves only through Advance(),
// SetNow() and SleepFor(). SleepFor() returns at once after advancing the fake
// time and records every requested duration, so tests assert backoff bounds
// without sleeping. Thread-safe: the router calls it from worker threads.
#ifndef NARWHAL_TESTS_FAKES_FAKE_CLOCK_H_
#define NARWHAL_TESTS_FAKES_FAKE_CLOCK_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/post.hpp>

#include "engines/api.h"
#include "engines/cancel_token.h"
#include "engines/clock.h"

namespace narwhal::testing {

class FakeClock : public engines::Clock {
 public:
  using Duration = engines::MonoClock::duration;

  explicit FakeClock(engines::MonoTime start = engines::MonoClock::now(),
                     double wall_start = 1.7e9)
      : start_(start), now_(start), wall_(wall_start) {}

  // The time the clock was built at.
  engines::MonoTime start() const { return start_; }

  engines::MonoTime Now() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return now_;
  }

  double WallNow() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return wall_;
  }

  // Retry backoff on fake time: records `d`, runs the sleep hook (if any),
  // then advances the fake time by `d` and returns true at once — or returns
  // false without advancing when `cancel` has fired (before the call or
  // inside the hook).
  boost::asio::awaitable<bool> Sleep(const engines::Executor&, Duration d,
                                     engines::CancelToken* cancel) const override {
    std::function<void(Duration)> hook;
    {
      std::lock_guard<std::mutex> lock(mu_);
      sleeps_.push_back(d);
      hook = sleep_hook_;
    }
    if (hook) hook(d);
    if (cancel != nullptr && cancel->cancelled()) co_return false;
    const_cast<FakeClock*>(this)->Advance(d);
    co_return true;
  }

  // Moves monotonic and wall time forward together; timers whose deadline
  // has passed complete (their handlers are posted to their loops).
  void Advance(Duration d) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      now_ += d;
      wall_ += engines::Seconds(d);
    }
    FireDue();
  }
  void Advance(double seconds) { Advance(engines::FromSeconds(seconds)); }

  // Moves time to the earliest pending timer's deadline and fires it (and
  // any other due timer). False when no timer is pending.
  bool AdvanceToNextTimer() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (waits_.empty()) return false;
      engines::MonoTime next = engines::MonoTime::max();
      for (const auto& w : waits_) next = std::min(next, w.deadline);
      if (next > now_) {
        wall_ += engines::Seconds(next - now_);
        now_ = next;
      }
    }
    FireDue();
    return true;
  }

  // Timers waiting now.
  size_t pending_timers() const {
    std::lock_guard<std::mutex> lock(mu_);
    return waits_.size();
  }

  // The deadlines of the timers waiting now, earliest first.
  std::vector<engines::MonoTime> pending_deadlines() const {
    std::vector<engines::MonoTime> out;
    {
      std::lock_guard<std::mutex> lock(mu_);
      out.reserve(waits_.size());
      for (const Wait& w : waits_) out.push_back(w.deadline);
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  std::unique_ptr<engines::Timer> NewTimer(const engines::Executor& executor) const override {
    return std::make_unique<FakeTimer>(const_cast<FakeClock&>(*this), executor);
  }
  void SetNow(engines::MonoTime t) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      now_ = t;
    }
    FireDue();
  }
  void SetWallNow(double unix_seconds) {
    std::lock_guard<std::mutex> lock(mu_);
    wall_ = unix_seconds;
  }

  // Every duration Sleep() was asked for, in call order.
  std::vector<Duration> sleeps() const {
    std::lock_guard<std::mutex> lock(mu_);
    return sleeps_;
  }

  // Runs inside Sleep(), on the sleeping loop, before the cancel check:
  // lets a test act "during" a backoff (e.g. the client goes away).
  void SetSleepHook(std::function<void(Duration)> hook) {
    std::lock_guard<std::mutex> lock(mu_);
    sleep_hook_ = std::move(hook);
  }

 private:
  struct Wait {
    uint64_t timer;
    engines::MonoTime deadline;
    engines::Executor executor;
    std::shared_ptr<absl::AnyInvocable<void(bool)>> done;
  };

  class FakeTimer : public engines::Timer {
   public:
    FakeTimer(FakeClock& clock, engines::Executor executor)
        : clock_(clock), executor_(std::move(executor)), id_(clock.NextTimerId()) {}
    ~FakeTimer() override { Cancel(); }
    void AsyncWait(engines::MonoTime deadline, absl::AnyInvocable<void(bool)> done) override {
      Cancel();
      clock_.AddWait(Wait{id_, deadline, executor_,
                          std::make_shared<absl::AnyInvocable<void(bool)>>(std::move(done))});
    }
    void Cancel() override { clock_.CancelWaits(id_); }

   private:
    FakeClock& clock_;
    engines::Executor executor_;
    uint64_t id_;
  };

  uint64_t NextTimerId() {
    std::lock_guard<std::mutex> lock(mu_);
    return ++next_timer_;
  }
  void AddWait(Wait w) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      waits_.push_back(std::move(w));
    }
    FireDue();
  }
  void CancelWaits(uint64_t timer) { Complete([&](const Wait& w) { return w.timer == timer; }, false); }
  void FireDue() {
    engines::MonoTime now = Now();
    Complete([&](const Wait& w) { return w.deadline <= now; }, true);
  }
  template <typename Pred>
  void Complete(Pred pred, bool fired) {
    std::vector<Wait> done;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto it = waits_.begin(); it != waits_.end();) {
        if (pred(*it)) {
          done.push_back(std::move(*it));
          it = waits_.erase(it);
        } else {
          ++it;
        }
      }
    }
    for (Wait& w : done) {
      boost::asio::post(w.executor, [d = w.done, fired] { (*d)(fired); });
    }
  }

  mutable std::mutex mu_;
  std::vector<Wait> waits_;
  uint64_t next_timer_ = 0;
  const engines::MonoTime start_;
  mutable engines::MonoTime now_;
  mutable double wall_;
  mutable std::vector<Duration> sleeps_;
  std::function<void(Duration)> sleep_hook_;
};

}  // namespace narwhal::testing

#endif  // NARWHAL_TESTS_FAKES_FAKE_CLOCK_H_
