#include "server/embedded_fleet.h"

namespace narwhal::server {

absl::StatusOr<std::unique_ptr<EmbeddedFleet>> EmbeddedFleet::Start() {
  std::unique_ptr<EmbeddedFleet> fleet(new EmbeddedFleet());
  fleet->settings_.model = "Qwen/Qwen3-0.6B";
  const struct {
    const char* iid;
    router::Role role;
    sim::SimRole sim_role;
  } kEngines[] = {{"p0", router::Role::kPrefill, sim::SimRole::kPrefill},
                  {"p1", router::Role::kPrefill, sim::SimRole::kPrefill},
                  {"d0", router::Role::kDecode, sim::SimRole::kDecode},
                  {"d1", router::Role::kDecode, sim::SimRole::kDecode}};
  for (const auto& e : kEngines) {
    sim::SimOptions options;
    options.host = "127.0.0.1";
    options.port = 0;
    options.engine_id = e.iid;
    options.model = fleet->settings_.model;
    options.role = e.sim_role;
    // Modest, visible latencies: a demo stream reads like a real one.
    options.prefill_ms_per_1k_tokens = 20;
    options.kv_transfer_ms = 1;
    options.token_interval_ms = 10;
    auto engine = std::make_unique<sim::SimEngine>(options);
    if (absl::Status s = engine->Start(); !s.ok()) return s;
    fleet->settings_.engines.push_back(
        router::EngineSettings{e.iid, engine->url(), e.role, /*kv_engine_id=*/e.iid});
    fleet->engines_.push_back(std::move(engine));
  }
  // As the config loader derives it: the handoff age limit below the lease.
  fleet->settings_.serving.handoff_timeout_s = 0.8 * fleet->settings_.handoff.lease_s;
  return fleet;
}

EmbeddedFleet::~EmbeddedFleet() {
  for (auto& engine : engines_) engine->Stop();
}

}  // namespace narwhal::server
