// The router reads time through the engine layer's injected clock
// (engines/clock.h): monotonic time for deadlines, breakers and latencies,
// wall time for journal timestamps, timers on the event loops.
#ifndef NARWHAL_ROUTER_COMMON_CLOCK_H_
#define NARWHAL_ROUTER_COMMON_CLOCK_H_

#include "engines/clock.h"

namespace narwhal::router {

using engines::MonoTime;
using Clock = engines::Clock;
using RealClock = engines::RealClock;

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_COMMON_CLOCK_H_
