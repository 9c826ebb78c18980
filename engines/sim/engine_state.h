// What the routes of one simulated engine share. Internal to narwhal_sim.
#ifndef NARWHAL_ENGINES_SIM_ENGINE_STATE_H_
#define NARWHAL_ENGINES_SIM_ENGINE_STATE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "engines/sim/fault_rules.h"
#include "engines/sim/kv_event_publisher.h"
#include "engines/sim/kv_store.h"
#include "engines/sim/prefill_lanes.h"
#include "engines/sim/prefix_cache.h"
#include "engines/sim/request_log.h"
#include "engines/sim/sim_log.h"
#include "engines/sim/sim_options.h"
#include "engines/sim/stop_signal.h"

namespace narwhal::sim {

// Unix time in seconds, with sub-second precision.
double NowSeconds();

// `n` random lowercase hex digits.
std::string RandomHex(int n);

struct EngineState {
  explicit EngineState(SimOptions opts);

  const SimOptions options;
  const std::string fingerprint;
  const std::string advertised_host;
  const int64_t created;  // unix seconds at construction
  std::atomic<int> port{0};

  SimLog log;
  FaultBook faults;
  KvStore kv;
  RequestLog requests;
  PrefixCache prefix_cache;
  PrefillLanes prefill_lanes;
  // Notified once when the engine stops: every wait ends.
  StopSignal stopping;
  // Inference requests in progress (vllm:num_requests_running).
  std::atomic<int> running{0};
  // KV pulls that failed on this consumer, the recompute fault's included
  // (vllm:nixl_num_failed_transfers_total).
  std::atomic<int64_t> failed_transfers{0};
  // KV-cache events; null unless options.kv_events_port >= 0 (set by
  // SimEngine::Start before it serves, the prefix cache's sink).
  std::unique_ptr<KvEventPublisher> kv_events;
};

}  // namespace narwhal::sim

#endif  // NARWHAL_ENGINES_SIM_ENGINE_STATE_H_
