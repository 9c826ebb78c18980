// The soak's fleet: six narwhal-sim engines (two prefill, two decode, two
// both) on fixed ports below the ephemeral range, so that an engine that
// was killed comes back on its port even while clients churn through
// ephemeral ports, and the fleet config the router runs with.
#ifndef NARWHAL_TESTS_SOAK_FLEET_H_
#define NARWHAL_TESTS_SOAK_FLEET_H_

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "tests/fakes/sim_process.h"
#include "tests/soak/soak_options.h"

namespace narwhal::soak {

enum class EngineState { kUp, kStopped, kDown };

struct SoakEngine {
  std::string iid;
  std::string role;  // prefill | decode | both
  std::unique_ptr<testing::SimProcess> sim;
  EngineState state = EngineState::kUp;
  // When a frozen engine is resumed / a dead one restarted.
  absl::Time back_at;
  // Rules posted since its book was last cleared (a book holds 1000).
  int rules = 0;

  bool serves_prefill() const { return role != "decode"; }
  bool serves_decode() const { return role != "prefill"; }
};

// Starts the six engines.
absl::StatusOr<std::vector<SoakEngine>> StartFleet(const SoakOptions& options,
                                                   std::mt19937_64& rng);

// The router's config over `engines`: short engine timeouts and fast
// breaker cadences (probes every 0.5 s, liveness every 1 s), so that an
// engine that recovers is readmitted within seconds; serving.max_inflight
// just under `streams`.
nlohmann::json SoakFleetConfig(const std::vector<SoakEngine>& engines, int streams);

// The router's request deadline in that config.
inline constexpr int kRequestTimeoutS = 15;

}  // namespace narwhal::soak

#endif  // NARWHAL_TESTS_SOAK_FLEET_H_
