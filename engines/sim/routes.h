// The HTTP routes of a simulated engine. Internal to narwhal_sim.
//
//   service:   GET /health, GET|POST /ping, GET /version, GET /v1/models,
//              GET /metrics
//   inference: POST /v1/completions, POST /v1/chat/completions
//   control:   GET|POST|DELETE /sim/faults, GET|DELETE /sim/requests,
//              GET /sim/kv, POST /sim/kv/pull, GET /sim/info
//
// Every request except /sim/* is recorded in state.requests. With an API
// key configured, /v1/* answers 401 {"error":"Unauthorized"} to requests
// without "Authorization: Bearer <key>".
#ifndef NARWHAL_ENGINES_SIM_ROUTES_H_
#define NARWHAL_ENGINES_SIM_ROUTES_H_

#include <httplib.h>

#include "engines/sim/engine_state.h"

namespace narwhal::sim {

void AddServiceRoutes(httplib::Server& server, EngineState& state);
void AddInferenceRoutes(httplib::Server& server, EngineState& state);
void AddControlRoutes(httplib::Server& server, EngineState& state);

// True when `req` may use /v1/* (no key configured, or the right one sent).
bool Authorized(const EngineState& state, const httplib::Request& req);

}  // namespace narwhal::sim

#endif  // NARWHAL_ENGINES_SIM_ROUTES_H_
