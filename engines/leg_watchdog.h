// LegWatchdog: one thread that aborts engine legs whose timer expired.
//
// httplib's blocking client has no total deadline and its read timeout is an
// idle timeout per recv, so a leg arms a Timer here instead: before connect
// for the first-token budget (B12), re-armed on every chunk after the first
// token (B13). On expiry the watchdog runs the timer's callback (which stops
// the leg's client) on its own thread.
//
// Re-arming to a later time — once per relayed chunk — takes no lock: it
// stores the new deadline and the thread re-checks a timer's current
// deadline when its scheduled heap entry comes due. Only an earlier deadline
// than the scheduled entry takes the lock to push a new entry. Thread-safe.
#ifndef NARWHAL_ENGINES_LEG_WATCHDOG_H_
#define NARWHAL_ENGINES_LEG_WATCHDOG_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
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
    static constexpr int64_t kNever = INT64_MAX;
    static int64_t Ticks(MonoTime t) {
      return t == MonoTime::max() ? kNever : t.time_since_epoch().count();
    }

    LegWatchdog* owner_;
    std::function<void()> on_fire_;
    // The current deadline (kNever: disarmed). Written by the leg without the
    // lock; read by the watchdog thread.
    std::atomic<int64_t> deadline_{kNever};
    // The earliest heap entry for this timer (kNever: none). Written under
    // owner_->mu_; read without it by ArmAt's fast path.
    std::atomic<int64_t> scheduled_{kNever};
    std::atomic<bool> fired_{false};  // written under owner_->mu_
  };

 private:
  struct Entry {
    int64_t when;
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
