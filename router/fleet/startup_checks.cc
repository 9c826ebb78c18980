#include "router/fleet/startup_checks.h"

#include <algorithm>
#include <array>
#include <optional>
#include <utility>

#include "router/common/log.h"

namespace narwhal::router {

StartupChecks::StartupChecks(FleetControl& fleet, Prober& prober, engines::Executor executor,
                             engines::MonoClock::duration retry, size_t max_checkers)
    : fleet_(fleet),
      prober_(prober),
      clock_(prober.clock()),
      retry_(retry),
      max_checkers_(std::max<size_t>(1, max_checkers)),
      tasks_(std::move(executor), "start-up checks") {}

StartupChecks::~StartupChecks() { Stop(); }

void StartupChecks::Start() {
  std::lock_guard<std::mutex> lock(mu_);
  if (stop_) return;
  stop_ = std::make_unique<engines::CancelToken>();
  queue_.clear();
  // The engines by role, in fleet order, then interleaved.
  std::array<std::vector<std::string>, 3> by_role;
  for (const EngineSettings& e : fleet_.engines()) {
    by_role[static_cast<size_t>(e.role)].push_back(e.iid);
  }
  const MonoTime now = clock_.Now();
  for (size_t k = 0;; ++k) {
    bool more = false;
    for (const std::vector<std::string>& iids : by_role) {
      if (k >= iids.size()) continue;
      queue_.push_back(Pending{iids[k], now, 0, ""});
      more = true;
    }
    if (!more) break;
  }
  const size_t n = std::min(max_checkers_, queue_.size());
  for (size_t t = 0; t < n; ++t) tasks_.Spawn(Checker(stop_.get()));
}

size_t StartupChecks::running() const { return tasks_.running(); }

size_t StartupChecks::waiting() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size();
}

void StartupChecks::Stop() {
  std::unique_ptr<engines::CancelToken> stop;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stop_) return;
    stop_->Cancel();
    stop = std::move(stop_);
  }
  tasks_.Wait();  // the checkers read `stop` until they end
  std::lock_guard<std::mutex> lock(mu_);
  queue_.clear();
}

engines::Awaitable<void> StartupChecks::Checker(engines::CancelToken* stop) {
  // An engine being checked has its checker, which puts it back after a
  // failure and goes on; a checker ends when the idle ones are enough for
  // the engines waiting (one each), so the checkers shrink with the line.
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop->cancelled() && !queue_.empty()) {
    const MonoTime now = clock_.Now();
    const MonoTime due = queue_.front().due;
    if (due > now) {
      if (idle_ >= queue_.size()) break;
      ++idle_;
      lock.unlock();
      co_await engines::SleepUntil(clock_, tasks_.executor(), due, stop);
      lock.lock();
      --idle_;
      continue;
    }
    Pending p = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    const bool done = co_await CheckOnce(p);
    lock.lock();
    if (done) continue;
    p.due = clock_.Now() + retry_;
    const auto at = std::upper_bound(queue_.begin(), queue_.end(), p.due,
                                     [](MonoTime t, const Pending& q) { return t < q.due; });
    queue_.insert(at, std::move(p));
  }
}

engines::Awaitable<void> StartupChecks::LearnModelLen(engines::EngineTarget target) {
  const long long n = co_await prober_.MaxModelLen(target);
  if (n > 0) {
    fleet_.RecordMaxModelLen(target.iid, n);
  } else {
    LogInfo("engine " + target.iid + " reports no max_model_len on /v1/models");
  }
}

engines::Awaitable<bool> StartupChecks::CheckOnce(Pending& p) {
  const std::optional<engines::EngineTarget> found = fleet_.Target(p.iid);
  if (!found) {
    LogInfo("engine " + p.iid + " left the fleet before passing its start-up health check");
    co_return true;
  }
  const engines::EngineTarget target = *found;
  if (fleet_.Checked(target.iid)) {  // a probe or a served leg got there first
    co_await LearnModelLen(target);
    co_return true;
  }
  ++p.attempts;
  const std::string who = "engine " + target.iid + " (" + target.url + ")";
  const ProbeResult r = co_await prober_.Health(target, /*lifecycle=*/false);
  if (r.outcome == ProbeOutcome::kPassed) {
    // Before readiness: a ready router knows the model's context length.
    co_await LearnModelLen(target);
    fleet_.RecordSuccess(target.iid, Success::kLiveness);
    LogInfo(who + " passed its start-up health check (attempt " + std::to_string(p.attempts) +
            "): it counts towards readiness");
    co_return true;
  }
  if (r.detail != p.last_failure) {
    LogWarning(
        who + " failed its start-up health check: " + r.detail + "; retrying every " +
        std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(retry_).count()) +
        " ms (not counted towards readiness)");
    p.last_failure = r.detail;
  }
  co_return false;
}

}  // namespace narwhal::router
