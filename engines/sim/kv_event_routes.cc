// The control routes of the KV-event publisher: GET /sim/kv_events (its counters) and
// POST /sim/kv_events {"drop_next": N, "restart": true, "stall_replay": B}
// (faults: numbered batches never sent; the sequence from 0 again with the
// prefix cache emptied silently, as a restarted engine; replay requests
// left unanswered).
#include <httplib.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "engines/sim/routes.h"
#include "nlohmann/json.hpp"

namespace narwhal::sim {
namespace {

void Answer(httplib::Response& res, int status, const nlohmann::json& body) {
  res.status = status;
  res.set_content(body.dump(), "application/json");
}

}  // namespace

void AddKvEventRoutes(httplib::Server& server, EngineState& state) {
  server.Get("/sim/kv_events", [&state](const httplib::Request&, httplib::Response& res) {
    if (!state.kv_events) return Answer(res, 404, {{"detail", "KV events are off"}});
    Answer(res, 200, state.kv_events->Stats());
  });
  server.Post("/sim/kv_events", [&state](const httplib::Request& req, httplib::Response& res) {
    if (!state.kv_events) return Answer(res, 404, {{"detail", "KV events are off"}});
    const nlohmann::json body = nlohmann::json::parse(req.body, nullptr, false);
    if (!body.is_object()) return Answer(res, 400, {{"detail", "a JSON object is expected"}});
    if (body.contains("drop_next")) {
      if (!body["drop_next"].is_number_integer() || body["drop_next"].get<int64_t>() < 0 ||
          body["drop_next"].get<int64_t>() > 1000000) {
        return Answer(res, 400, {{"detail", "drop_next: an integer 0..1000000"}});
      }
      state.kv_events->DropNext(body["drop_next"].get<int>());
    }
    if (body.contains("stall_replay")) {
      if (!body["stall_replay"].is_boolean()) {
        return Answer(res, 400, {{"detail", "stall_replay: a boolean"}});
      }
      state.kv_events->StallReplay(body["stall_replay"].get<bool>());
    }
    if (body.value("restart", false)) {
      state.prefix_cache.Reset(/*announce=*/false);
      state.kv_events->RestartSequence();
      state.log.Info("KV events: the sequence restarts at 0, the prefix cache emptied");
    }
    Answer(res, 200, state.kv_events->Stats());
  });
}

}  // namespace narwhal::sim
