#include "router/fleet/startup_checks.h"

#include <string>

#include "router/common/log.h"

namespace narwhal::router {

StartupChecks::StartupChecks(Fleet& fleet, Prober& prober, std::chrono::milliseconds retry)
    : fleet_(fleet), prober_(prober), retry_(retry) {}

StartupChecks::~StartupChecks() { Stop(); }

void StartupChecks::Start() {
  std::lock_guard<std::mutex> lock(mu_);
  stop_ = false;
  for (size_t i = 0; i < fleet_.engines().size(); ++i) {
    threads_.emplace_back([this, i] { Check(i); });
  }
}

void StartupChecks::Stop() {
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    threads.swap(threads_);
  }
  cv_.notify_all();
  for (std::thread& t : threads) t.join();
}

void StartupChecks::LearnModelLen(const engines::EngineTarget& target) {
  const long long n = prober_.MaxModelLen(target);
  if (n > 0) {
    fleet_.RecordMaxModelLen(target.iid, n);
  } else {
    LogInfo("engine " + target.iid + " reports no max_model_len on /v1/models");
  }
}

void StartupChecks::Check(size_t index) {
  const engines::EngineTarget target = fleet_.Target(index);
  const std::string who = "engine " + target.iid + " (" + target.url + ")";
  std::string last_failure;
  for (int attempt = 1;; ++attempt) {
    if (fleet_.Checked(index)) {  // a probe or a served leg got there first
      LearnModelLen(target);
      return;
    }
    const ProbeResult r = prober_.Health(target, /*lifecycle=*/false);
    if (r.outcome == ProbeOutcome::kPassed) {
      // Before readiness: a ready router knows the model's context length.
      LearnModelLen(target);
      fleet_.RecordSuccess(target.iid, Success::kHealth);
      LogInfo(who + " passed its start-up health check (attempt " + std::to_string(attempt) +
              "): it counts towards readiness");
      return;
    }
    if (r.detail != last_failure) {
      LogWarning(who + " failed its start-up health check: " + r.detail + "; retrying every " +
                 std::to_string(retry_.count()) + " ms (not counted towards readiness)");
      last_failure = r.detail;
    }
    std::unique_lock<std::mutex> lock(mu_);
    if (cv_.wait_for(lock, retry_, [this] { return stop_; })) return;
  }
}

}  // namespace narwhal::router
