// A cancellation signal threaded through a client request (B19).
//
// The front door calls Cancel() when its client goes away; every in-flight
// engine leg has registered a callback that aborts its upstream connection.
// Thread-safe. Callbacks run once, on the thread that calls Cancel() (or on
// the registering thread if the token was already cancelled), outside the
// token's lock.
#ifndef NARWHAL_ENGINES_CANCEL_TOKEN_H_
#define NARWHAL_ENGINES_CANCEL_TOKEN_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>

namespace narwhal::engines {

class CancelToken {
 public:
  CancelToken() = default;
  CancelToken(const CancelToken&) = delete;
  CancelToken& operator=(const CancelToken&) = delete;

  void Cancel();
  bool cancelled() const { return cancelled_.load(std::memory_order_acquire); }

  // RAII registration: the callback is removed when the handle dies, and the
  // destructor waits for a running callback to finish, so the callback may
  // safely reference objects that outlive the handle.
  class Registration {
   public:
    Registration() = default;
    Registration(CancelToken* token, std::function<void()> fn);
    ~Registration();
    Registration(const Registration&) = delete;
    Registration& operator=(const Registration&) = delete;

   private:
    CancelToken* token_ = nullptr;
    uint64_t id_ = 0;
  };

 private:
  std::atomic<bool> cancelled_{false};
  std::mutex mu_;
  std::map<uint64_t, std::function<void()>> callbacks_;
  uint64_t next_id_ = 1;
  // Serialises running callbacks with unregistration.
  std::mutex run_mu_;
};

}  // namespace narwhal::engines

#endif  // NARWHAL_ENGINES_CANCEL_TOKEN_H_
