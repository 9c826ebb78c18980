// Fleet: the model's context length (max_model_len), learned from the
// engines' /v1/models or pinned by engine_contract.max_model_len.
#include <string>

#include "router/common/log.h"
#include "router/fleet/fleet.h"

namespace narwhal::router {

long long Fleet::max_model_len() const {
  const long long reported = max_model_len_.load(std::memory_order_relaxed);
  if (reported > 0) return reported;
  return pinned_max_model_len_.load(std::memory_order_relaxed);
}

void Fleet::RecordMaxModelLen(const std::string& iid, long long max_model_len) {
  if (max_model_len <= 0) return;
  long long current = max_model_len_.load(std::memory_order_relaxed);
  while (current == 0 || max_model_len < current) {
    if (max_model_len_.compare_exchange_weak(current, max_model_len, std::memory_order_relaxed)) {
      if (current == 0) {
        Log(LogLevel::kInfo,
            "fleet: " + settings()->model + " has a context length of " +
                std::to_string(max_model_len) + " tokens (max_model_len from " + iid +
                "'s /v1/models): requests asking for more are refused before any prefill",
            {{"iid", iid}, {"max_model_len", max_model_len}});
      } else {
        Log(LogLevel::kWarning,
            "fleet: " + iid + " reports max_model_len " + std::to_string(max_model_len) +
                ", below the " + std::to_string(current) +
                " seen so far: the smaller one is the limit",
            {{"iid", iid}, {"max_model_len", max_model_len}, {"previous", current}});
      }
      return;
    }
  }
  if (max_model_len != current) {
    Log(LogLevel::kWarning,
        "fleet: " + iid + " reports max_model_len " + std::to_string(max_model_len) +
            ", above the fleet's limit " + std::to_string(current) + ": the limit stays",
        {{"iid", iid}, {"max_model_len", max_model_len}, {"limit", current}});
  }
}

}  // namespace narwhal::router
