// A producer's KV handoffs: blocks held under a lease until a consumer pulls
// them or the lease runs out. Pure logic with an injectable clock.
//
// Lifecycle of an entry: Hold() -> held; Pull() -> consumed (once);
// Release() -> released (a consumer refused the request carrying it before
// admission and notified the producer, as vLLM's
// notify_kv_transfer_request_rejected does); a held entry whose lease ran out
// becomes expired (checked on every call, so no timer thread is needed). The
// most recent kHistory consumed, released and expired entries are remembered
// so that a late pull gets 409 or 410 rather than "unknown". Thread-safe.
#ifndef NARWHAL_ENGINES_SIM_KV_STORE_H_
#define NARWHAL_ENGINES_SIM_KV_STORE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "nlohmann/json.hpp"

namespace narwhal::sim {

// Who pulled an entry (as the consumer described itself).
struct KvConsumer {
  std::string engine_id;
  std::string request_id;
  std::string peer;  // the consumer's address as the producer saw it
};

enum class KvState { kHeld, kConsumed, kExpired, kReleased };

struct KvEntry {
  KvState state = KvState::kHeld;
  std::string remote_request_id;
  std::vector<int> block_ids;  // one KV-cache group
  int num_tokens = 0;
  double created_at = 0;  // unix seconds
  double expires_at = 0;
  double ended_at = 0;  // consumed, released or expired at; 0 while held
  KvConsumer consumer;  // set once consumed or released

  // {"state": "held"|"consumed"|"expired", "remote_request_id",
  //  "remote_block_ids": [[...]], "remote_num_tokens", "created_at",
  //  "expires_at"} plus "consumed_at" and "consumer" {engine_id, request_id,
  //  peer} for a consumed entry, "released_at" and "consumer" for a released
  //  one, or "expired_at" for an expired one.
  nlohmann::json ToJson() const;
};

enum class PullOutcome { kOk, kUnknown, kConsumed, kExpired, kReleased };

struct PullResult {
  PullOutcome outcome = PullOutcome::kUnknown;
  KvEntry entry;  // valid for kOk (and for kConsumed / kExpired from history)
};

class KvStore {
 public:
  // Unix time in seconds.
  using Clock = std::function<double()>;

  static constexpr size_t kHistory = 1000;
  static constexpr size_t kMaxHeld = 100000;
  static constexpr int kTokensPerBlock = 16;
  static constexpr int kMaxBlocksPerEntry = 4096;

  KvStore(double lease_s, Clock clock);

  // Holds ceil(num_tokens / 16) blocks (at least 1) for a new handoff. When
  // kMaxHeld entries are already held, the oldest expires early.
  KvEntry Hold(std::string remote_request_id, int num_tokens);

  // Consumes the entry. kUnknown when never held (or forgotten), kConsumed
  // when pulled before, kExpired when its lease ran out.
  PullResult Pull(absl::string_view remote_request_id, KvConsumer consumer);
  // Frees the entry without a transfer (the consumer that refused it names
  // itself in `consumer`). Outcomes as Pull's; kReleased when released
  // before.
  PullResult Release(absl::string_view remote_request_id, KvConsumer consumer);

  // Handoffs that expired so far (vllm:nixl_num_kv_expired_reqs_total).
  uint64_t expired_total();
  size_t held_count();

  // {"held": [...], "consumed": [...], "released": [...], "expired": [...]},
  // oldest first.
  nlohmann::json ToJson();

 private:
  PullResult EndLocked(absl::string_view id, KvConsumer consumer, KvState to, double now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ExpireDueLocked(double now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ExpireLocked(const std::string& id, double now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static void Remember(std::deque<KvEntry>* history, KvEntry entry);
  static const KvEntry* Find(const std::deque<KvEntry>& history, absl::string_view id);

  const double lease_s_;
  const Clock clock_;
  absl::Mutex mu_;
  std::unordered_map<std::string, KvEntry> held_ ABSL_GUARDED_BY(mu_);
  // Held ids in creation order (= expiry order, the lease being constant);
  // ids no longer held are skipped.
  std::deque<std::pair<double, std::string>> order_ ABSL_GUARDED_BY(mu_);
  std::deque<KvEntry> consumed_ ABSL_GUARDED_BY(mu_);
  std::deque<KvEntry> released_ ABSL_GUARDED_BY(mu_);
  std::deque<KvEntry> expired_ ABSL_GUARDED_BY(mu_);
  uint64_t expired_total_ ABSL_GUARDED_BY(mu_) = 0;
  int next_block_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace narwhal::sim

#endif  // NARWHAL_ENGINES_SIM_KV_STORE_H_
