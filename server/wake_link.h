// WakeLink: lets threads outside gRPC (router workers, event publishers)
// wake a callback-API reactor without outliving it.
//
// The reactor keeps a shared_ptr to its link and calls Done() from OnDone();
// wakers hold a shared_ptr too and call Wake(), which runs the reactor's
// Pump(). gRPC may run OnDone inline inside a Finish that a wake-up
// triggered, so deletion waits until no wake-up is on the stack: whoever
// leaves last — OnDone or the last wake-up — deletes the reactor.
#ifndef NARWHAL_SERVER_WAKE_LINK_H_
#define NARWHAL_SERVER_WAKE_LINK_H_

#include <functional>
#include <memory>
#include <mutex>

namespace narwhal::server {

template <typename Reactor>
class WakeLink {
 public:
  explicit WakeLink(Reactor* reactor) : reactor_(reactor) {}

  // A callback that wakes the reactor, for ResponseChannel::SetReadyCallback.
  static std::function<void()> Callback(const std::shared_ptr<WakeLink>& link) {
    return [link] { link->Wake(); };
  }

  void Wake() {
    std::unique_lock<std::mutex> lock(mu_);
    if (done_) return;
    ++busy_;
    lock.unlock();
    reactor_->Pump();
    lock.lock();
    const bool remove = --busy_ == 0 && done_;
    lock.unlock();
    if (remove) delete reactor_;
  }

  // From the reactor's OnDone.
  void Done() {
    std::unique_lock<std::mutex> lock(mu_);
    done_ = true;
    if (busy_ > 0) return;  // the running wake-up deletes it
    lock.unlock();
    delete reactor_;
  }

 private:
  std::mutex mu_;
  Reactor* const reactor_;
  int busy_ = 0;
  bool done_ = false;
};

}  // namespace narwhal::server

#endif  // NARWHAL_SERVER_WAKE_LINK_H_
