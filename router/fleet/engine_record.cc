#include "router/fleet/engine_record.h"

#include <utility>

namespace narwhal::router {

EngineRecord::EngineRecord(EngineSettings settings, uint64_t id, size_t index_chunks)
    : settings_(std::move(settings)),
      target_{settings_.iid, settings_.url, settings_.kv_engine_id},
      id_(id) {
  if (index_chunks > 0 && CanPrefill(settings_.role)) {
    index_ = std::make_unique<PrefixIndex>(index_chunks);
  }
}

size_t EngineRecord::Match(const PromptKey& key) const {
  if (index_ == nullptr) return 0;
  std::lock_guard<std::mutex> lock(index_mu_);
  return index_->Match(key);
}

void EngineRecord::Insert(const PromptKey& key) {
  if (index_ == nullptr) return;
  std::lock_guard<std::mutex> lock(index_mu_);
  index_->Insert(key);
}

size_t EngineRecord::IndexSize() const {
  if (index_ == nullptr) return 0;
  std::lock_guard<std::mutex> lock(index_mu_);
  return index_->size();
}

size_t EngineRecord::IndexCapacity() const { return index_ == nullptr ? 0 : index_->capacity(); }

size_t EngineRecord::ClearIndex() {
  if (index_ == nullptr) return 0;
  std::lock_guard<std::mutex> lock(index_mu_);
  const size_t held = index_->size();
  index_->Clear();
  return held;
}

}  // namespace narwhal::router
