#include "engines/clock.h"

#include <chrono>

#include <boost/asio/steady_timer.hpp>

namespace narwhal::engines {
namespace {

class RealTimer : public Timer {
 public:
  explicit RealTimer(const Executor& executor) : timer_(executor) {}

  void AsyncWait(MonoTime deadline, absl::AnyInvocable<void(bool)> done) override {
    timer_.expires_at(deadline);  // cancels a pending wait
    timer_.async_wait([done = std::move(done)](const boost::system::error_code& ec) mutable {
      done(!ec);
    });
  }

  void Cancel() override { timer_.cancel(); }

 private:
  boost::asio::steady_timer timer_;
};

}  // namespace

double RealClock::WallNow() const {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::unique_ptr<Timer> RealClock::NewTimer(const Executor& executor) const {
  return std::make_unique<RealTimer>(executor);
}

}  // namespace narwhal::engines
