// AdminService::WatchEvents: one stream per call, a bounded EventBus watcher.
#include <grpcpp/alarm.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <optional>
#include <utility>

#include "server/admin/admin_callbacks.h"
#include "server/admin/admin_mappers.h"
#include "server/admin/admin_service.h"
#include "server/log.h"
#include "server/wake_link.h"

namespace narwhal::server {

namespace pb = narwhal::admin::v1;

// One WatchEvents stream: a bounded EventBus watcher. Replays the requested
// history, then relays live events, one write in flight. The stream ends
// when its watcher overflows (RESOURCE_EXHAUSTED) or is closed at shutdown
// (UNAVAILABLE); a client that takes nothing more cannot hold it past
// AdminOptions::watch_stall_timeout from then: the call is cancelled.
class AdminService::WatchReactor : public grpc::ServerWriteReactor<pb::Event> {
 public:
  WatchReactor(AdminService& service, grpc::CallbackServerContext* context,
               const pb::WatchEventsRequest& request)
      : service_(service),
        context_(context),
        link_(std::make_shared<WakeLink<WatchReactor>>(this)),
        stalled_(std::make_shared<std::atomic<bool>>(false)) {
    if (grpc::Status admitted = service_.Admit(context); !admitted.ok()) {
      finished_ = true;
      Finish(admitted);
      return;
    }
    // Watch first, then read the history: nothing published in between is
    // lost, and live copies of replayed events are skipped. Wake-ups wait
    // on mu_ until the replay is in place.
    std::unique_lock<std::mutex> lock(mu_);
    std::shared_ptr<WakeLink<WatchReactor>> link = link_;
    watcher_ = service_.events_.Watch(service_.watch_limits_, [link] { link->Wake(); });
    if (!watcher_) {
      finished_ = true;
      lock.unlock();
      service_.LogWatchLimit(
          "refused a WatchEvents stream: " + std::to_string(service_.watch_limits_.max_watchers) +
          " watchers are open (admin.max_watchers); refused so far: " +
          std::to_string(service_.events_.watch_stats().refused));
      Finish(grpc::Status(
          grpc::StatusCode::RESOURCE_EXHAUSTED,
          "too many event watchers: " + std::to_string(service_.watch_limits_.max_watchers) +
              " are open (admin.max_watchers); retry later"));
      return;
    }
    bool shutting_down = false;
    {
      std::lock_guard<std::mutex> service_lock(service_.mu_);
      shutting_down = service_.shutting_down_;
      if (!shutting_down) service_.watchers_.insert(watcher_);
    }
    if (shutting_down) {
      finished_ = true;
      lock.unlock();
      Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, kAdminShuttingDown));
      return;
    }
    if (request.has_since_seq()) {
      replay_until_ = request.since_seq();
      for (router::EventBus::SharedEvent& e : service_.events_.SharedSince(request.since_seq())) {
        replay_until_ = std::max(replay_until_, e->seq);
        replay_.push_back(std::move(e));
      }
    }
    lock.unlock();
    Pump();
  }

  // Writes the next event if none is in flight, or ends the stream.
  void Pump() {
    std::unique_lock<std::mutex> lock(mu_);
    if (watcher_ && !ending_) {
      ending_ = Ending();
      if (ending_) ArmStallGuard();
    }
    if (ending_ && stalled_->load() && !cancel_sent_) {
      // The client has not taken the stream's end: free its resources.
      cancel_sent_ = true;
      lock.unlock();
      context_->TryCancel();
      return;
    }
    if (writing_ || finished_) return;
    if (ending_) {
      finished_ = true;
      const grpc::Status status = *ending_;
      lock.unlock();
      Finish(status);
      return;
    }
    router::EventBus::SharedEvent event;
    if (!replay_.empty()) {
      event = std::move(replay_.front());
      replay_.pop_front();
    } else {
      do {
        if (!watcher_->TryPop(&event)) return;  // the watcher wakes us on the next one
      } while (event->seq <= replay_until_);
    }
    FillEvent(*event, &message_);
    writing_ = true;
    lock.unlock();
    StartWrite(&message_);
  }

  void OnWriteDone(bool ok) override {
    {
      std::unique_lock<std::mutex> lock(mu_);
      writing_ = false;
      if (!ok || cancelled_) {  // the client is gone
        if (finished_) return;
        finished_ = true;
        lock.unlock();
        Finish(grpc::Status(grpc::StatusCode::CANCELLED, "watcher went away"));
        return;
      }
    }
    Pump();
  }

  void OnCancel() override {
    std::unique_lock<std::mutex> lock(mu_);
    cancelled_ = true;
    // With a write in flight, OnWriteDone(false) finishes.
    if (writing_ || finished_) return;
    finished_ = true;
    lock.unlock();
    Finish(grpc::Status(grpc::StatusCode::CANCELLED, "watcher went away"));
  }

  void OnDone() override {
    if (watcher_) {
      service_.events_.Unwatch(watcher_);
      std::lock_guard<std::mutex> lock(service_.mu_);
      service_.watchers_.erase(watcher_);
    }
    if (stall_alarm_) stall_alarm_->Cancel();
    std::shared_ptr<WakeLink<WatchReactor>> link = link_;  // outlives the reactor
    link->Done();
  }

 private:
  // The status to end the stream with, once it must end (under mu_).
  std::optional<grpc::Status> Ending() {
    if (watcher_->closed()) return grpc::Status(grpc::StatusCode::UNAVAILABLE, kAdminShuttingDown);
    if (!watcher_->overflowed()) return std::nullopt;
    const router::WatchLimits& limits = service_.watch_limits_;
    std::string bound = std::to_string(limits.buffer_bytes) + " bytes";
    if (limits.buffer_events > 0) {
      bound += " or " + std::to_string(limits.buffer_events) + " events";
    }
    service_.LogWatchLimit("ended a slow WatchEvents stream: its buffer passed " + bound + ", " +
                           std::to_string(watcher_->dropped()) +
                           " events dropped; slow watchers ended so far: " +
                           std::to_string(service_.events_.watch_stats().overflowed));
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        "subscriber too slow: events dropped (more than " + bound +
                            " queued); reconnect with since_seq to catch up");
  }

  // From the decision to end on, the stream has watch_stall_timeout to end.
  void ArmStallGuard() {
    if (stall_alarm_) return;
    stall_alarm_ = std::make_unique<grpc::Alarm>();
    std::shared_ptr<WakeLink<WatchReactor>> link = link_;
    std::shared_ptr<std::atomic<bool>> stalled = stalled_;
    stall_alarm_->Set(std::chrono::system_clock::now() + service_.options_.watch_stall_timeout,
                      [link, stalled](bool fired) {
                        if (!fired) return;  // cancelled: the stream ended
                        stalled->store(true);
                        link->Wake();
                      });
  }

  AdminService& service_;
  grpc::CallbackServerContext* const context_;
  std::shared_ptr<WakeLink<WatchReactor>> link_;
  const std::shared_ptr<std::atomic<bool>> stalled_;
  std::shared_ptr<router::EventBus::Watcher> watcher_;
  std::unique_ptr<grpc::Alarm> stall_alarm_;
  std::mutex mu_;
  std::deque<router::EventBus::SharedEvent> replay_;
  long long replay_until_ = 0;
  std::optional<grpc::Status> ending_;
  bool writing_ = false;
  bool finished_ = false;
  bool cancelled_ = false;
  bool cancel_sent_ = false;
  pb::Event message_;
};

grpc::ServerWriteReactor<pb::Event>* AdminService::WatchEvents(
    grpc::CallbackServerContext* context, const pb::WatchEventsRequest* request) {
  return new WatchReactor(*this, context, *request);
}

void AdminService::LogWatchLimit(const std::string& message) {
  long long suppressed = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const router::MonoTime now = clock_.Now();
    if (now < next_watch_log_) {
      ++watch_logs_suppressed_;
      return;
    }
    next_watch_log_ = now + std::chrono::seconds(1);
    suppressed = watch_logs_suppressed_;
    watch_logs_suppressed_ = 0;
  }
  std::string line = "narwhal-serve: admin: " + message;
  if (suppressed > 0) line += " (" + std::to_string(suppressed) + " similar lines suppressed)";
  LogWarning(line);
}

}  // namespace narwhal::server
