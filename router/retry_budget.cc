#include "router/retry_budget.h"

#include <algorithm>
#include <cmath>

namespace narwhal::router {
namespace {

constexpr int64_t kOne = 1000;  // one credit, in thousandths

}  // namespace

int64_t RetryBudget::Milli(double credits) {
  return static_cast<int64_t>(std::llround(std::max(0.0, credits) * kOne));
}

RetryBudget::RetryBudget(double size, double replenish)
    : size_(Milli(size)), replenish_(Milli(replenish)), credits_(Milli(size)) {}

bool RetryBudget::TryAcquire() {
  int64_t credits = credits_.load(std::memory_order_relaxed);
  do {
    if (credits < kOne) return false;
  } while (!credits_.compare_exchange_weak(credits, credits - kOne, std::memory_order_relaxed));
  return true;
}

void RetryBudget::AddCapped(int64_t milli) {
  int64_t credits = credits_.load(std::memory_order_relaxed);
  int64_t next = 0;
  do {
    next = std::min(size_.load(std::memory_order_relaxed), credits + milli);
    if (next <= credits) return;  // full already
  } while (!credits_.compare_exchange_weak(credits, next, std::memory_order_relaxed));
}

void RetryBudget::Refund() { AddCapped(kOne); }

void RetryBudget::OnSuccess() { AddCapped(replenish_.load(std::memory_order_relaxed)); }

double RetryBudget::credits() const {
  return static_cast<double>(credits_.load(std::memory_order_relaxed)) / kOne;
}

void RetryBudget::Resize(double size, double replenish) {
  size_.store(Milli(size), std::memory_order_relaxed);
  replenish_.store(Milli(replenish), std::memory_order_relaxed);
  int64_t credits = credits_.load(std::memory_order_relaxed);
  while (credits > Milli(size) &&
         !credits_.compare_exchange_weak(credits, Milli(size), std::memory_order_relaxed)) {
  }
}

}  // namespace narwhal::router
