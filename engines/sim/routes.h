// The HTTP routes of a simulated engine. Internal to narwhal_sim.
//
//   service:   GET /health, GET|POST /ping (200, empty body), GET /version
//              {"version": V}, GET /v1/models (vLLM model list), GET /metrics
//              (vllm:num_requests_running, vllm:num_requests_waiting,
//              vllm:nixl_num_kv_expired_reqs_total, with the prefix cache
//              on vllm:prefix_cache_queries_total and
//              vllm:prefix_cache_hits_total; labels engine, model_name)
//   inference: POST /v1/completions, POST /v1/chat/completions (see
//              openai_request.h for validation, generation.h for serving)
//   control (never recorded, never authenticated):
//     POST /sim/faults    {"faults": [rule, ...]} appends rules after those
//                         held (DELETE first to replace them); 200 with the
//                         book, or 400 naming the bad field (fault_rules.h)
//     GET /sim/faults     {"faults": [{"kind", "phase", "times" (remaining),
//                         "fired", ...params}]}
//     DELETE /sim/faults  clears the rules
//     GET /sim/requests   {"requests": [record, ...]} oldest first, at most
//                         2000 (request_log.h)
//     DELETE /sim/requests  clears the records
//     GET /sim/kv         {"held": [...], "consumed": [...], "expired": [...]}
//                         (kv_store.h)
//     POST /sim/kv/pull   a consumer's pull of a handoff (kv_pull.h)
//     GET|DELETE /sim/prefix_cache  hit rates of the prefix cache
//     GET /sim/info       {"engine_id", "model", "role", "host", "port",
//                         "version", "max_model_len", "system_fingerprint",
//                         the latency knobs, "threads",
//                         "kv_load_failure_policy", "api_key" (bool)}
//
// Every request outside /sim/ is recorded in state.requests. With an API
// key configured, /v1/* answers 401 {"error":"Unauthorized"} to requests
// without "Authorization: Bearer <key>". Unknown paths answer 404
// {"detail":"Not Found"}.
#ifndef NARWHAL_ENGINES_SIM_ROUTES_H_
#define NARWHAL_ENGINES_SIM_ROUTES_H_

#include <httplib.h>

#include "engines/sim/engine_state.h"

namespace narwhal::sim {

void AddServiceRoutes(httplib::Server& server, EngineState& state);
void AddInferenceRoutes(httplib::Server& server, EngineState& state);
void AddControlRoutes(httplib::Server& server, EngineState& state);
// GET /sim/prefix_cache: the prefix cache's counters (PrefixCache::Stats);
// DELETE /sim/prefix_cache empties it and zeroes them. Control routes.
void AddPrefixCacheRoutes(httplib::Server& server, EngineState& state);

// GET /sim/kv_events: the KV-event publisher's counters; POST /sim/kv_events
// injects its faults (engines/sim/kv_event_routes.cc). 404 when events are
// off. Control routes.
void AddKvEventRoutes(httplib::Server& server, EngineState& state);
// True when `req` may use /v1/* (no key configured, or the right one sent).
bool Authorized(const EngineState& state, const httplib::Request& req);

}  // namespace narwhal::sim

#endif  // NARWHAL_ENGINES_SIM_ROUTES_H_
