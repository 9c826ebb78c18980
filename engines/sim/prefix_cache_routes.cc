#include "engines/sim/routes.h"

namespace narwhal::sim {

void AddPrefixCacheRoutes(httplib::Server& server, EngineState& state) {
  server.Get("/sim/prefix_cache", [&state](const httplib::Request&, httplib::Response& res) {
    res.status = 200;
    res.set_content(state.prefix_cache.Stats().dump(), "application/json");
  });
  server.Delete("/sim/prefix_cache", [&state](const httplib::Request&, httplib::Response& res) {
    state.prefix_cache.Reset();
    state.log.Info("prefix cache emptied");
    res.status = 200;
    res.set_content(state.prefix_cache.Stats().dump(), "application/json");
  });
}

}  // namespace narwhal::sim
