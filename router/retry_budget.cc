#include "router/retry_budget.h"

#include <algorithm>

namespace narwhal::router {

bool RetryBudget::TryAcquire() {
  std::lock_guard<std::mutex> lock(mu_);
  // A small epsilon: ten replenishments of 0.1 make a whole credit.
  if (credits_ < 1.0 - 1e-9) return false;
  credits_ = std::max(0.0, credits_ - 1.0);
  return true;
}

void RetryBudget::Refund() {
  std::lock_guard<std::mutex> lock(mu_);
  credits_ = std::min(size_, credits_ + 1.0);
}

void RetryBudget::OnSuccess() {
  std::lock_guard<std::mutex> lock(mu_);
  credits_ = std::min(size_, credits_ + replenish_);
}

double RetryBudget::credits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return credits_;
}

}  // namespace narwhal::router
