// Time sources. Monotonic time drives deadlines, breakers and latencies; wall
// time is only for journal timestamps and OpenAI `created` fields.
#ifndef NARWHAL_ROUTER_CLOCK_H_
#define NARWHAL_ROUTER_CLOCK_H_

#include <chrono>

#include "engines/api.h"
#include "engines/cancel_token.h"

namespace narwhal::router {

using engines::MonoTime;

class Clock {
 public:
  virtual ~Clock() = default;
  virtual MonoTime Now() const = 0;
  // Unix seconds.
  virtual double WallNow() const = 0;
  // Waits `d` (retry backoff). Returns false early if `cancel` fires.
  virtual bool SleepFor(engines::MonoClock::duration d, engines::CancelToken* cancel) const = 0;
};

class RealClock : public Clock {
 public:
  MonoTime Now() const override { return engines::MonoClock::now(); }
  double WallNow() const override {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
  bool SleepFor(engines::MonoClock::duration d, engines::CancelToken* cancel) const override;
};

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_CLOCK_H_
