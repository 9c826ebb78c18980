#include "engines/cancel_token.h"

#include <utility>
#include <vector>

namespace narwhal::engines {

void CancelToken::Cancel() {
  // Once cancelled, always cancelled: a later Cancel() (a callback's own,
  // say, which runs under run_mu_) returns without taking mu_, so the only
  // order the two locks are ever taken in is mu_, then run_mu_.
  if (cancelled_.load(std::memory_order_acquire)) return;
  std::vector<std::function<void()>> to_run;
  std::unique_lock<std::mutex> lock(mu_);
  if (cancelled_.exchange(true, std::memory_order_acq_rel)) return;
  for (auto& [id, fn] : callbacks_) to_run.push_back(std::move(fn));
  callbacks_.clear();
  // Take run_mu_ before releasing mu_: a Registration whose callback was just
  // taken then waits in its destructor until the callback has run.
  std::lock_guard<std::mutex> run_lock(run_mu_);
  lock.unlock();
  for (auto& fn : to_run) fn();
}

CancelToken::Registration::Registration(CancelToken* token, std::function<void()> fn) {
  if (token == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(token->mu_);
    if (!token->cancelled()) {
      token_ = token;
      id_ = token->next_id_++;
      token->callbacks_.emplace(id_, std::move(fn));
      return;
    }
  }
  fn();  // already cancelled: run at once
}

CancelToken::Registration::~Registration() {
  if (token_ == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(token_->mu_);
    if (token_->callbacks_.erase(id_) > 0) return;  // never ran, never will
  }
  // Taken by a concurrent Cancel(): wait until it has finished running.
  std::lock_guard<std::mutex> run_lock(token_->run_mu_);
}

}  // namespace narwhal::engines
