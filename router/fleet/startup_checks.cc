#include "router/fleet/startup_checks.h"

#include <algorithm>
#include <array>
#include <optional>
#include <utility>

#include "router/common/log.h"

namespace narwhal::router {

StartupChecks::StartupChecks(Fleet& fleet, Prober& prober, std::chrono::milliseconds retry,
                             size_t max_threads, std::chrono::milliseconds poll)
    : fleet_(fleet),
      prober_(prober),
      clock_(prober.clock()),
      retry_(retry),
      max_threads_(std::max<size_t>(1, max_threads)),
      poll_(std::max(poll, std::chrono::milliseconds(1))) {}

StartupChecks::~StartupChecks() { Stop(); }

void StartupChecks::Start() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!threads_.empty()) return;
  stop_ = false;
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
  const size_t n = std::min(max_threads_, queue_.size());
  running_ = n;
  for (size_t t = 0; t < n; ++t) threads_.emplace_back([this] { Checker(); });
}

size_t StartupChecks::running() const {
  std::lock_guard<std::mutex> lock(mu_);
  return running_;
}

size_t StartupChecks::waiting() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size();
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
  std::lock_guard<std::mutex> lock(mu_);
  queue_.clear();
}

void StartupChecks::Checker() {
  std::unique_lock<std::mutex> lock(mu_);
  // An engine being checked has its checker, which puts it back after a
  // failure and goes on; a checker ends when the idle ones are enough for
  // the engines waiting (one each), so the threads shrink with the line.
  while (!stop_ && !queue_.empty()) {
    const MonoTime now = clock_.Now();
    const MonoTime due = queue_.front().due;
    if (due > now) {
      if (idle_ >= queue_.size()) break;
      const auto wait = std::min<std::chrono::nanoseconds>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(due - now), poll_);
      ++idle_;
      cv_.wait_for(lock, wait, [this] { return stop_; });
      --idle_;
      continue;
    }
    Pending p = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    const bool done = CheckOnce(p);
    lock.lock();
    if (done) continue;
    p.due = clock_.Now() + retry_;
    const auto at = std::upper_bound(queue_.begin(), queue_.end(), p.due,
                                     [](MonoTime t, const Pending& q) { return t < q.due; });
    queue_.insert(at, std::move(p));
  }
  --running_;
}

void StartupChecks::LearnModelLen(const engines::EngineTarget& target) {
  const long long n = prober_.MaxModelLen(target);
  if (n > 0) {
    fleet_.RecordMaxModelLen(target.iid, n);
  } else {
    LogInfo("engine " + target.iid + " reports no max_model_len on /v1/models");
  }
}

bool StartupChecks::CheckOnce(Pending& p) {
  const std::optional<engines::EngineTarget> found = fleet_.Target(p.iid);
  if (!found) {
    LogInfo("engine " + p.iid + " left the fleet before passing its start-up health check");
    return true;
  }
  const engines::EngineTarget& target = *found;
  if (fleet_.Checked(target.iid)) {  // a probe or a served leg got there first
    LearnModelLen(target);
    return true;
  }
  ++p.attempts;
  const std::string who = "engine " + target.iid + " (" + target.url + ")";
  const ProbeResult r = prober_.Health(target, /*lifecycle=*/false);
  if (r.outcome == ProbeOutcome::kPassed) {
    // Before readiness: a ready router knows the model's context length.
    LearnModelLen(target);
    fleet_.RecordSuccess(target.iid, Success::kLiveness);
    LogInfo(who + " passed its start-up health check (attempt " + std::to_string(p.attempts) +
            "): it counts towards readiness");
    return true;
  }
  if (r.detail != p.last_failure) {
    LogWarning(who + " failed its start-up health check: " + r.detail + "; retrying every " +
               std::to_string(retry_.count()) + " ms (not counted towards readiness)");
    p.last_failure = r.detail;
  }
  return false;
}

}  // namespace narwhal::router
