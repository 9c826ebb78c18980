#include "router/clock.h"

#include <condition_variable>
#include <mutex>

namespace narwhal::router {

bool RealClock::SleepFor(engines::MonoClock::duration d, engines::CancelToken* cancel) const {
  std::mutex mu;
  std::condition_variable cv;
  bool woken = false;
  engines::CancelToken::Registration hook(cancel, [&] {
    std::lock_guard<std::mutex> lock(mu);
    woken = true;
    cv.notify_all();
  });
  std::unique_lock<std::mutex> lock(mu);
  cv.wait_for(lock, d, [&] { return woken; });
  return !woken;
}

}  // namespace narwhal::router
