#include "tests/soak/engine_monitor.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "narwhal/admin/v1/admin.grpc.pb.h"

namespace narwhal::soak {

namespace pb = narwhal::admin::v1;

class EngineMonitor::Impl {
 public:
  explicit Impl(const std::string& target)
      : stub_(pb::Admin::NewStub(grpc::CreateChannel(target, grpc::InsecureChannelCredentials()))) {}

  ~Impl() { Stop(); }

  void Start() {
    thread_ = std::thread([this] {
      while (!stop_.load()) {
        Poll();
        absl::SleepFor(absl::Milliseconds(250));
      }
    });
  }

  void Stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }

  // One ListEngines; records the states. Empty map when the call failed.
  std::map<std::string, std::string> Poll() {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    pb::ListEnginesResponse response;
    const grpc::Status status = stub_->ListEngines(&context, pb::ListEnginesRequest(), &response);
    std::map<std::string, std::string> states;
    absl::MutexLock lock(&mu_);
    ++stats_.polls;
    if (!status.ok()) {
      ++stats_.failed_polls;
      return states;
    }
    const absl::Time now = absl::Now();
    for (const pb::Engine& e : response.engines()) {
      states[e.iid()] = e.state();
      std::string& last = last_[e.iid()];
      if (e.state() != "serving") ++stats_.out_polls[e.state()];
      if (!last.empty() && last != "serving" && e.state() == "serving") {
        ++stats_.readmissions[e.iid()];
      }
      last = e.state();
      timeline_[e.iid()].emplace_back(now, e.state());
    }
    current_ = states;
    return states;
  }

  std::map<std::string, std::string> CurrentStates() const {
    absl::MutexLock lock(&mu_);
    return current_;
  }

  std::string WaitAllServing(absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    std::string seen = "no ListEngines answer";
    for (;;) {
      const std::map<std::string, std::string> states = Poll();
      std::vector<std::string> out;
      for (const auto& [iid, state] : states) {
        if (state != "serving") out.push_back(absl::StrCat(iid, "=", state));
      }
      if (!states.empty()) seen = absl::StrJoin(out, " ");
      if (!states.empty() && out.empty()) return "";
      if (absl::Now() >= deadline) return seen;
      absl::SleepFor(absl::Milliseconds(250));
    }
  }

  EngineMonitorStats stats() const {
    absl::MutexLock lock(&mu_);
    return stats_;
  }

  std::map<std::string, std::string> LastStates() const {
    absl::MutexLock lock(&mu_);
    return last_;
  }

  std::vector<RecoveryLatency> Latencies(const std::vector<Recovery>& recoveries) const {
    absl::MutexLock lock(&mu_);
    std::vector<RecoveryLatency> out;
    for (const Recovery& r : recoveries) {
      RecoveryLatency l;
      l.recovery = r;
      auto it = timeline_.find(r.iid);
      if (it != timeline_.end()) {
        // Its outage: from a few seconds before its return (a freeze or a
        // kill lasts at most 3 s) to its readmission.
        for (const auto& [at, state] : it->second) {
          if (at < r.back_at - absl::Seconds(4)) continue;
          if (at > r.until) break;
          if (state != "serving") l.left_placement = true;
          if (at >= r.back_at && state == "serving") {
            l.readmitted = true;
            l.latency = at - r.back_at;
            break;
          }
        }
      }
      out.push_back(l);
    }
    return out;
  }

 private:
  std::unique_ptr<pb::Admin::Stub> stub_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  mutable absl::Mutex mu_;
  EngineMonitorStats stats_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> last_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> current_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::vector<std::pair<absl::Time, std::string>>> timeline_
      ABSL_GUARDED_BY(mu_);
};

EngineMonitor::EngineMonitor(const std::string& admin_target)
    : impl_(std::make_unique<Impl>(admin_target)) {}
EngineMonitor::~EngineMonitor() = default;
void EngineMonitor::Start() { impl_->Start(); }
void EngineMonitor::Stop() { impl_->Stop(); }
std::string EngineMonitor::WaitAllServing(absl::Duration timeout) {
  return impl_->WaitAllServing(timeout);
}
EngineMonitorStats EngineMonitor::stats() const { return impl_->stats(); }
std::map<std::string, std::string> EngineMonitor::LastStates() const {
  return impl_->LastStates();
}
std::map<std::string, std::string> EngineMonitor::CurrentStates() const {
  return impl_->CurrentStates();
}
std::vector<RecoveryLatency> EngineMonitor::Latencies(
    const std::vector<Recovery>& recoveries) const {
  return impl_->Latencies(recoveries);
}

}  // namespace narwhal::soak
