// The injected time source of the request path and the control plane.
//
// Monotonic time drives deadlines, breakers, timers and latencies; wall time
// is only for journal timestamps and OpenAI `created` fields. Timers come
// from the clock too, so every timer and deadline of the data plane (B12/B13
// budgets, the prefill bound, the request deadline, retry backoff) runs on
// fake time in tests (tests/fakes/fake_clock.h) without sleeping.
#ifndef NARWHAL_ENGINES_CLOCK_H_
#define NARWHAL_ENGINES_CLOCK_H_

#include <absl/functional/any_invocable.h>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <memory>

#include "engines/api.h"
#include "engines/cancel_token.h"

namespace narwhal::engines {

using Executor = boost::asio::any_io_executor;

// One timer on one event loop. Not thread-safe: use it from its executor.
class Timer {
 public:
  virtual ~Timer() = default;
  // Calls `done(true)` on the timer's executor once the clock reaches
  // `deadline`, or `done(false)` if Cancel() comes first. One wait at a
  // time; a new wait replaces (cancels) a pending one.
  virtual void AsyncWait(MonoTime deadline, absl::AnyInvocable<void(bool)> done) = 0;
  // Ends a pending wait with `false`; no-op when none is pending.
  virtual void Cancel() = 0;
};

class Clock {
 public:
  virtual ~Clock() = default;
  virtual MonoTime Now() const = 0;
  // Unix seconds.
  virtual double WallNow() const = 0;
  // A timer whose completions run on `executor`.
  virtual std::unique_ptr<Timer> NewTimer(const Executor& executor) const = 0;
  // Waits `d` on `executor` (retry backoff). True when the time passed; false
  // as soon as `cancel` (may be null) fires.
  virtual boost::asio::awaitable<bool> Sleep(const Executor& executor, MonoClock::duration d,
                                             CancelToken* cancel) const;
};

class RealClock : public Clock {
 public:
  MonoTime Now() const override { return MonoClock::now(); }
  double WallNow() const override;
  std::unique_ptr<Timer> NewTimer(const Executor& executor) const override;
};

// Waits on `executor` until `clock` reads `deadline` (a timer of the clock:
// on a test clock, until the test moves time past it). True when the time
// came; false as soon as `cancel` (may be null) fires. Unlike Clock::Sleep
// (retry backoff, which a test clock may pass at once), this always waits
// for the clock: the control plane's ticks and retries use it.
boost::asio::awaitable<bool> SleepUntil(const Clock& clock, const Executor& executor,
                                        MonoTime deadline, CancelToken* cancel);

// Asio-style wait on a Timer: completes with `bool fired` (signature
// void(bool)), e.g. `bool fired = co_await AsyncWaitUntil(t, d, use_awaitable)`.
template <typename CompletionToken>
auto AsyncWaitUntil(Timer& timer, MonoTime deadline, CompletionToken&& token) {
  return boost::asio::async_initiate<CompletionToken, void(bool)>(
      [&timer, deadline](auto handler) {
        timer.AsyncWait(deadline,
                        [h = std::move(handler)](bool fired) mutable { std::move(h)(fired); });
      },
      token);
}

}  // namespace narwhal::engines

#endif  // NARWHAL_ENGINES_CLOCK_H_
