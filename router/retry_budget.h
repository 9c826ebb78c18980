// RetryBudget: the shared retry-credit pool (B14).
//
// Starts full at `serving.retry_budget`, gains `serving.retry_replenish` per
// successful client request (capped), and a retry takes one whole credit when
// it is scheduled; a retry that ends before dispatching its prefill gives the
// credit back. Thread-safe and lock-free: every successful request touches
// it. Credits are kept in thousandths, so ten replenishments of 0.1 make
// exactly one credit (and the gauge shows 0.8, not 0.8000000000000005).
#ifndef NARWHAL_ROUTER_RETRY_BUDGET_H_
#define NARWHAL_ROUTER_RETRY_BUDGET_H_

#include <atomic>
#include <cstdint>

namespace narwhal::router {

class RetryBudget {
 public:
  RetryBudget(double size, double replenish);

  // Takes one credit when a whole one is left.
  bool TryAcquire();
  // Gives a credit taken by TryAcquire back (capped at the size).
  void Refund();
  // A successful client request adds the replenishment (capped).
  void OnSuccess();
  double credits() const;
  // A reload's size and replenishment; credits above the new size are cut.
  void Resize(double size, double replenish);

 private:
  static int64_t Milli(double credits);
  void AddCapped(int64_t milli);

  std::atomic<int64_t> size_;
  std::atomic<int64_t> replenish_;
  std::atomic<int64_t> credits_;
};

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_RETRY_BUDGET_H_
