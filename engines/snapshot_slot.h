// SnapshotSlot: one immutable value that a single owner replaces and any
// thread reads, without a lock shared by the readers. Publish() swaps in a
// new value; Get() returns the current one. Each reading thread keeps its
// last copy and the slot's version beside it, so a read is one atomic load
// of the version (and the copy of a shared_ptr) until the owner publishes
// again; only then does a thread take the slot's mutex to copy the new
// value. (Not std::atomic<std::shared_ptr>: libstdc++ 12 releases its lock
// bit with a relaxed store after a load, which is a data race by the memory
// model that ThreadSanitizer reports between a reader and the next Publish.)
#ifndef NARWHAL_ENGINES_SNAPSHOT_SLOT_H_
#define NARWHAL_ENGINES_SNAPSHOT_SLOT_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
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
      std::lock_guard<std::mutex> lock(mu_);
      cache.value = value_;
      cache.slot = this;
      cache.instance = instance_;
      cache.version = version;
    }
    return cache.value;
  }

  // The owner only (one publisher at a time).
  void Publish(std::shared_ptr<const T> value) {
    std::shared_ptr<const T> old;
    {
      std::lock_guard<std::mutex> lock(mu_);
      old = std::exchange(value_, std::move(value));
    }
    version_.fetch_add(1, std::memory_order_acq_rel);
    // `old` is released here, outside the lock.
  }

  uint64_t version() const { return version_.load(std::memory_order_acquire); }

 private:
  // Distinguishes slots that reuse an address (the per-thread copies).
  static uint64_t NextInstance() {
    static std::atomic<uint64_t> next{1};
    return next.fetch_add(1, std::memory_order_relaxed);
  }

  mutable std::mutex mu_;  // value_; taken by a reader only after a Publish
  std::shared_ptr<const T> value_;
  std::atomic<uint64_t> version_{0};
  const uint64_t instance_;
};

}  // namespace narwhal::engines

#endif  // NARWHAL_ENGINES_SNAPSHOT_SLOT_H_
