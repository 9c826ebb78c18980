// RetryBudget: the shared retry-credit pool (B14).
//
// Starts full at `serving.retry_budget`, gains `serving.retry_replenish` per
// successful client request (capped), and a retry takes one whole credit when
// it is scheduled; a retry that ends before dispatching its prefill gives the
// credit back. Thread-safe.
#ifndef NARWHAL_ROUTER_RETRY_BUDGET_H_
#define NARWHAL_ROUTER_RETRY_BUDGET_H_

#include <mutex>

namespace narwhal::router {

class RetryBudget {
 public:
  RetryBudget(double size, double replenish) : size_(size), replenish_(replenish), credits_(size) {}

  // Takes one credit if at least one remains.
  bool TryAcquire();
  // Returns a credit taken by a retry that never dispatched.
  void Refund();
  // One successful client request.
  void OnSuccess();
  double credits() const;

 private:
  const double size_;
  const double replenish_;
  mutable std::mutex mu_;
  double credits_;
};

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_RETRY_BUDGET_H_
