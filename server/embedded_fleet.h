// EmbeddedFleet: the simulated fleet narwhal-serve runs without --config
// (SPEC §2): 2 prefill + 2 decode narwhal-sim engines in-process on loopback,
// and the Settings that route to them.
#ifndef NARWHAL_SERVER_EMBEDDED_FLEET_H_
#define NARWHAL_SERVER_EMBEDDED_FLEET_H_

#include <memory>
#include <vector>

#include <absl/status/statusor.h>

#include "engines/sim/sim_engine.h"
#include "router/common/settings.h"

namespace narwhal::server {

class EmbeddedFleet {
 public:
  // Starts the engines; the returned Settings use the defaults of SPEC §3.
  static absl::StatusOr<std::unique_ptr<EmbeddedFleet>> Start();
  ~EmbeddedFleet();

  const router::Settings& settings() const { return settings_; }

 private:
  EmbeddedFleet() = default;
  std::vector<std::unique_ptr<sim::SimEngine>> engines_;
  router::Settings settings_;
};

}  // namespace narwhal::server

#endif  // NARWHAL_SERVER_EMBEDDED_FLEET_H_
