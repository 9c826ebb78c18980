// LegWatchdog: one thread that aborts engine legs whose timer expired.
//
// httplib's blocking client has no total deadline and its read timeout is an
// idle timeout per recv, so a leg arms a Timer here instead: before connect
// for the first-token budget (B12), re-armed on every chunk after the first
// token (B13). On expiry the watchdog runs the timer's callback (which stops
// the leg's client) on its own thread.
//
// Re-arming to a later time is cheap (no heap push); the thread re-checks a
// timer's current deadline when its scheduled entry comes due. Thread-safe.
#ifndef NARWHAL_ENGINES_LEG_WATCHDOG_H_
#define NARWHAL_ENGINES_LEG_WATCHDOG_H_

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <queue>
#include <thread>
#include <vector>

#include "engines/api.h"

namespace narwhal::engines {

class LegWatchdog {
 public:
  class Timer;

  LegWatchdog();
  ~LegWatchdog();
  LegWatchdog(const LegWatchdog&) = delete;
  LegWatchdog& operator=(const LegWatchdog&) = delete;

  // A disarmed timer whose expiry runs `on_fire` once on the watchdog thread.
  std::shared_ptr<Timer> NewTimer(std::function<void()> on_fire);

  class Timer : public std::enable_shared_from_this<Timer> {
   public:
    // Fires at `when` unless re-armed or disarmed first. No effect once fired.
    void ArmAt(MonoTime when);
    // Stops the timer; if its callback is running, waits for it to return.
    // After Disarm() the callback will not start.
    void Disarm();
    bool fired() const;

   private:
    friend class LegWatchdog;
    Timer(LegWatchdog* owner, std::function<void()> on_fire)
        : owner_(owner), on_fire_(std::move(on_fire)) {}
    LegWatchdog* owner_;
    std::function<void()> on_fire_;
    // Guarded by owner_->mu_.
    MonoTime deadline_ = MonoTime::max();
    MonoTime scheduled_ = MonoTime::max();  // earliest heap entry for this timer
    bool fired_ = false;
  };

 private:
  struct Entry {
    MonoTime when;
    std::weak_ptr<Timer> timer;
    bool operator>(const Entry& o) const { return when > o.when; }
  };

  void Run();

  std::mutex mu_;
  std::condition_variable cv_;        // wakes the thread
  std::condition_variable done_cv_;   // signals a finished callback
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap_;
  Timer* running_ = nullptr;          // timer whose callback is running
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace narwhal::engines

#endif  // NARWHAL_ENGINES_LEG_WATCHDOG_H_
