// SnapshotSlot: one immutable value that a single owner replaces and any
// thread reads, without a lock shared by the readers. Publish() swaps in a
// new value; Get() returns the current one. Each reading thread keeps its
// last copy and the slot's version beside it, so a read is one atomic load
// of the version (and the copy of a shared_ptr) until the owner publishes
// again; only then does a thread touch the atomic shared_ptr itself, whose
// libstdc++ implementation briefly spins on a lock bit.
#ifndef NARWHAL_ENGINES_SNAPSHOT_SLOT_H_
#define NARWHAL_ENGINES_SNAPSHOT_SLOT_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <utility>

namespace narwhal::engines {

template <typename T>
class SnapshotSlot {
 public:
  explicit SnapshotSlot(std::shared_ptr<const T> initial) : instance_(NextInstance()) {
    Publish(std::move(initial));
  }
  SnapshotSlot(const SnapshotSlot&) = delete;
  SnapshotSlot& operator=(const SnapshotSlot&) = delete;

  // Never null once published. Any thread.
  std::shared_ptr<const T> Get() const {
    struct Cache {
      const SnapshotSlot* slot = nullptr;
      uint64_t instance = 0;
      uint64_t version = 0;
      std::shared_ptr<const T> value;
    };
    thread_local Cache cache;
    const uint64_t version = version_.load(std::memory_order_acquire);
    if (cache.slot != this || cache.instance != instance_ || cache.version != version) {
      // The value may be newer than `version`: the next read catches up.
      cache.value = value_.load(std::memory_order_acquire);
      cache.slot = this;
      cache.instance = instance_;
      cache.version = version;
    }
    return cache.value;
  }

  // The owner only (one publisher at a time).
  void Publish(std::shared_ptr<const T> value) {
    value_.store(std::move(value), std::memory_order_release);
    version_.fetch_add(1, std::memory_order_acq_rel);
  }

  uint64_t version() const { return version_.load(std::memory_order_acquire); }

 private:
  // Distinguishes slots that reuse an address (the per-thread copies).
  static uint64_t NextInstance() {
    static std::atomic<uint64_t> next{1};
    return next.fetch_add(1, std::memory_order_relaxed);
  }

  std::atomic<std::shared_ptr<const T>> value_;
  std::atomic<uint64_t> version_{0};
  const uint64_t instance_;
};

}  // namespace narwhal::engines

#endif  // NARWHAL_ENGINES_SNAPSHOT_SLOT_H_
