// Checks of a live engine against the fleet's expectations, shared by
// preflight (B18) and breaker readmission's lifecycle validation (B17):
//   reach    - GET /health answers 200 within engine.health_timeout_s;
//   contract - GET /version equals engine_contract.vllm_version, the served
//              model's max_model_len matches when pinned, the configured
//              connector is the pinned one, and (when pinned) a one-token
//              completion reports the pinned system_fingerprint;
//   model    - GET /v1/models lists the fleet's model.
// Each is a coroutine on the caller's loop and returns an empty string when
// it passes, else why it failed.
#ifndef NARWHAL_ROUTER_FLEET_CONTRACT_CHECK_H_
#define NARWHAL_ROUTER_FLEET_CONTRACT_CHECK_H_

#include <string>

#include "engines/engine_client.h"
#include "router/common/settings.h"

namespace narwhal::router {

engines::Awaitable<std::string> CheckReach(engines::AsyncEngineClient& client,
                                           engines::EngineTarget engine, const Settings& settings);
// Passes trivially when no engine_contract is configured.
engines::Awaitable<std::string> CheckContract(engines::AsyncEngineClient& client,
                                              engines::EngineTarget engine,
                                              const Settings& settings);
engines::Awaitable<std::string> CheckModel(engines::AsyncEngineClient& client,
                                           engines::EngineTarget engine, const Settings& settings);
// reach, then contract, then model: the first failure, or "".
engines::Awaitable<std::string> CheckLifecycle(engines::AsyncEngineClient& client,
                                               engines::EngineTarget engine,
                                               const Settings& settings);

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_FLEET_CONTRACT_CHECK_H_
