// EngineRecord: one engine as the request path sees it — its identity, its
// target, and the only per-engine state requests write: the legs in flight
// and the decode legs reserved on it (atomics), and its prefix index
// (cache_aware prefill, behind the record's own lock).
//
// Records are shared (std::shared_ptr): the fleet's owner holds one per
// member, every PlacementView holds the members it lists, and every
// Reservation holds the engine its leg runs on. A leg placed on an engine
// that has since left the fleet therefore still releases the right
// counters: the record lives until the last holder lets go. A changed url,
// role or kv_engine_id makes a new record (a new incarnation, B21).
//
// Thread-safe: the counters are atomics; the prefix index has its own
// mutex, taken only by cache-aware prefill placement on this engine. No
// Prometheus series here: the owner keeps those (engine_series.h).
#ifndef NARWHAL_ROUTER_FLEET_ENGINE_RECORD_H_
#define NARWHAL_ROUTER_FLEET_ENGINE_RECORD_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "engines/engine_client.h"
#include "engines/engine_failure.h"
#include "engines/cancel_token.h"
#include "router/common/settings.h"
#include "router/fleet/prefix_index.h"

namespace narwhal::router {

using engines::Phase;

class EngineRecord {
 public:
  // `index_chunks` > 0 keeps a prefix index of that capacity (cache_aware
  // prefill placement on a prefill-capable engine).
  EngineRecord(EngineSettings settings, uint64_t id, size_t index_chunks);
  EngineRecord(const EngineRecord&) = delete;
  EngineRecord& operator=(const EngineRecord&) = delete;

  const EngineSettings& settings() const { return settings_; }
  const std::string& iid() const { return settings_.iid; }
  const engines::EngineTarget& target() const { return target_; }
  // Unique per incarnation within a process run.
  uint64_t id() const { return id_; }

  // Load: legs in flight per phase, and decode legs reserved while their
  // prefill runs (placement load, not in flight).
  int inflight(Phase phase) const { return inflight_[Index(phase)].load(std::memory_order_relaxed); }
  int reserved() const { return reserved_.load(std::memory_order_relaxed); }
  bool Idle() const { return inflight(Phase::kPrefill) == 0 && inflight(Phase::kDecode) == 0; }
  void AddInflight(Phase phase, int delta) {
    inflight_[Index(phase)].fetch_add(delta, std::memory_order_relaxed);
  }
  void AddReserved(int delta) { reserved_.fetch_add(delta, std::memory_order_relaxed); }

  // Prefix index (empty when the engine keeps none).
  bool indexed() const { return index_ != nullptr; }
  size_t Match(const PromptKey& key) const;
  void Insert(const PromptKey& key);
  size_t IndexSize() const;
  size_t IndexCapacity() const;
  // Forgets the index (the engine's cache is gone); returns what it held.
  size_t ClearIndex();

  // Fired when the engine has left the fleet and its legs in flight outlast
  // membership.drain_timeout_s (B23): each leg on it registers here.
  engines::CancelToken& removed() { return removed_; }

 private:
  static int Index(Phase phase) { return phase == Phase::kPrefill ? 0 : 1; }

  const EngineSettings settings_;
  const engines::EngineTarget target_;
  const uint64_t id_;
  std::array<std::atomic<int>, 2> inflight_{};
  std::atomic<int> reserved_{0};
  engines::CancelToken removed_;
  mutable std::mutex index_mu_;
  std::unique_ptr<PrefixIndex> index_;
};

using EngineRef = std::shared_ptr<EngineRecord>;

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_FLEET_ENGINE_RECORD_H_
