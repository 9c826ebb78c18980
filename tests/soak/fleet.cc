#include "tests/soak/fleet.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace narwhal::soak {

absl::StatusOr<std::vector<SoakEngine>> StartFleet(const SoakOptions& options,
                                                   std::mt19937_64& rng) {
  const std::vector<std::pair<std::string, std::string>> layout = {
      {"p0", "prefill"}, {"p1", "prefill"}, {"d0", "decode"},
      {"d1", "decode"},  {"b0", "both"},    {"b1", "both"}};
  std::vector<SoakEngine> engines;
  // Ports 20000..29999: below the ephemeral range (32768..), so no client
  // connection can take a dead engine's port before it restarts.
  std::uniform_int_distribution<int> port(20000, 29999);
  for (const auto& [iid, role] : layout) {
    absl::Status last;
    for (int attempt = 0; attempt < 20; ++attempt) {
      absl::StatusOr<std::unique_ptr<testing::SimProcess>> sim = testing::SimProcess::Start(
          {"--port", absl::StrCat(port(rng)), "--engine-id", iid, "--role", role, "--model",
           "Qwen/Qwen3-0.6B", "--token-interval-ms", absl::StrCat(options.token_interval_ms),
           "--max-silence-s", "30"});
      if (sim.ok()) {
        SoakEngine e;
        e.iid = iid;
        e.role = role;
        e.sim = std::move(*sim);
        engines.push_back(std::move(e));
        break;
      }
      last = sim.status();  // most likely the port is taken: try another
    }
    if (engines.empty() || engines.back().iid != iid) {
      return absl::UnavailableError(absl::StrCat("cannot start engine ", iid, ": ", last.message()));
    }
  }
  return engines;
}

nlohmann::json SoakFleetConfig(const std::vector<SoakEngine>& engines, int streams) {
  nlohmann::json list = nlohmann::json::array();
  for (const SoakEngine& e : engines) {
    list.push_back({{"iid", e.iid}, {"url", e.sim->url()}, {"role", e.role}});
  }
  return {
      {"model", "Qwen/Qwen3-0.6B"},
      {"engines", list},
      {"serving",
       {{"max_attempts", 2},
        {"request_timeout_s", kRequestTimeoutS},
        {"prefill_timeout_s", 3},
        {"graceful_timeout_s", 10},
        {"retry_base_s", 0.02},
        {"retry_cap_s", 0.2},
        // Just under the streams: admission refusals (429) are part of the
        // mix, and every other stream is an answer in flight.
        {"max_inflight", std::max(1, streams - 5)}}},
      {"engine",
       {{"first_token_timeout_s", 1.5},
        {"decode_read_timeout_s", 1.5},
        {"connect_timeout_s", 1},
        {"health_timeout_s", 1}}},
      {"recovery",
       {{"eject_after", 3},
        {"failure_quarantine_s", 1},
        {"readmit_interval_s", 0.5},
        {"liveness_interval_s", 1},
        {"liveness_misses", 2}}},
      // Engines that leave (tests/soak/membership.h) finish their legs:
      // the drain outlasts any request's deadline.
      {"membership", {{"drain_timeout_s", 2 * kRequestTimeoutS}}},
  };
}

}  // namespace narwhal::soak
