#include "router/tenant_limits.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"

namespace narwhal::router {

struct TenantLimits::State {
  std::mutex mu;
  int inflight = 0;
  double tokens = 0;
  engines::MonoTime refilled{};
  bool bucket_started = false;
  prometheus::Gauge* inflight_gauge = nullptr;
  prometheus::Counter* throttled_inflight = nullptr;
  prometheus::Counter* throttled_rate = nullptr;
};

namespace {

// Gives one in-flight place back, once.
class TenantHold final : public AdmissionHold {
 public:
  explicit TenantHold(std::shared_ptr<TenantLimits::State> state) : state_(std::move(state)) {}
  ~TenantHold() override { Release(); }

  void Release() override {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (released_) return;
    released_ = true;
    --state_->inflight;
    if (state_->inflight_gauge != nullptr) state_->inflight_gauge->Decrement();
  }

 private:
  const std::shared_ptr<TenantLimits::State> state_;
  bool released_ = false;  // under state_->mu
};

}  // namespace

TenantLimits::TenantLimits(const engines::Clock& clock, Metrics* metrics)
    : clock_(clock), metrics_(metrics) {}

TenantLimits::~TenantLimits() = default;

std::shared_ptr<TenantLimits::State> TenantLimits::StateOf(const std::string& tenant) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = states_.find(tenant);
  if (it != states_.end()) return it->second;
  auto state = std::make_shared<State>();
  if (metrics_ != nullptr) {
    state->inflight_gauge = &metrics_->tenant_inflight.Add({{"tenant", tenant}});
    state->throttled_inflight =
        &metrics_->tenant_throttled_total.Add({{"tenant", tenant}, {"limit", "inflight"}});
    state->throttled_rate =
        &metrics_->tenant_throttled_total.Add({{"tenant", tenant}, {"limit", "rate"}});
  }
  states_.emplace(tenant, state);
  return state;
}

TenantGrant TenantLimits::Acquire(const TenantSettings& tenant) {
  std::shared_ptr<State> state = StateOf(tenant.name);
  TenantGrant grant;
  {
    std::lock_guard<std::mutex> lock(state->mu);
    if (tenant.max_inflight > 0 && state->inflight >= tenant.max_inflight) {
      grant.refused = Reason::kTenantInflightLimit;
      grant.message = absl::StrCat("tenant ", tenant.name, " in-flight limit reached (",
                                   tenant.max_inflight, ")");
      grant.retry_after_s = 1;
      if (state->throttled_inflight != nullptr) state->throttled_inflight->Increment();
      return grant;
    }
    if (tenant.requests_per_s > 0) {
      const engines::MonoTime now = clock_.Now();
      if (!state->bucket_started) {
        state->bucket_started = true;
        state->tokens = tenant.burst;
      } else {
        const double elapsed = std::max(0.0, engines::Seconds(now - state->refilled));
        state->tokens = state->tokens + elapsed * tenant.requests_per_s;
      }
      state->tokens = std::min(state->tokens, tenant.burst);
      state->refilled = now;
      if (state->tokens < 1.0) {
        grant.refused = Reason::kTenantRateLimit;
        grant.message = absl::StrCat("tenant ", tenant.name, " rate limit reached (",
                                     tenant.requests_per_s, " requests per second)");
        const double wait = (1.0 - state->tokens) / tenant.requests_per_s;
        grant.retry_after_s = std::max(1, static_cast<int>(std::ceil(wait)));
        if (state->throttled_rate != nullptr) state->throttled_rate->Increment();
        return grant;
      }
      state->tokens -= 1.0;
    }
    ++state->inflight;
    if (state->inflight_gauge != nullptr) state->inflight_gauge->Increment();
  }
  grant.hold = std::make_shared<TenantHold>(std::move(state));
  return grant;
}

int TenantLimits::InFlight(std::string_view tenant) const {
  std::shared_ptr<State> state;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = states_.find(tenant);
    if (it == states_.end()) return 0;
    state = it->second;
  }
  std::lock_guard<std::mutex> lock(state->mu);
  return state->inflight;
}

}  // namespace narwhal::router
