#include "engines/clock.h"

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>

namespace narwhal::engines {
namespace {

class RealTimer : public Timer {
 public:
  explicit RealTimer(const Executor& executor) : timer_(executor) {}

  void AsyncWait(MonoTime deadline, absl::AnyInvocable<void(bool)> done) override {
    timer_.expires_at(deadline);  // cancels a pending wait
    timer_.async_wait(
        [done = std::move(done)](const boost::system::error_code& ec) mutable { done(!ec); });
  }

  void Cancel() override { timer_.cancel(); }

 private:
  boost::asio::steady_timer timer_;
};

}  // namespace

boost::asio::awaitable<bool> Clock::Sleep(const Executor& executor, MonoClock::duration d,
                                          CancelToken* cancel) const {
  co_return co_await SleepUntil(*this, executor, Now() + d, cancel);
}

boost::asio::awaitable<bool> SleepUntil(const Clock& clock, const Executor& executor,
                                        MonoTime deadline, CancelToken* cancel) {
  if (cancel != nullptr && cancel->cancelled()) co_return false;
  std::shared_ptr<Timer> timer = clock.NewTimer(executor);
  std::weak_ptr<Timer> weak = timer;
  // The token may fire on any thread: the timer is cancelled on its loop.
  CancelToken::Registration hook(cancel, [weak, executor] {
    boost::asio::post(executor, [weak] {
      if (std::shared_ptr<Timer> t = weak.lock()) t->Cancel();
    });
  });
  const bool fired = co_await AsyncWaitUntil(*timer, deadline, boost::asio::use_awaitable);
  co_return fired && (cancel == nullptr || !cancel->cancelled());
}

double RealClock::WallNow() const {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::unique_ptr<Timer> RealClock::NewTimer(const Executor& executor) const {
  return std::make_unique<RealTimer>(executor);
}

}  // namespace narwhal::engines
