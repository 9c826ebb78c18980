// The engine an AddEngine call describes (B25), checked by the fleet file's
// own rules for an engine id and URL (server/config/address_rules.h).
#ifndef NARWHAL_SERVER_ADMIN_RUNTIME_ENGINE_H_
#define NARWHAL_SERVER_ADMIN_RUNTIME_ENGINE_H_

#include <absl/status/statusor.h>

#include <string>
#include <vector>

#include "router/common/settings.h"

namespace narwhal::server {

// The engine, or INVALID_ARGUMENT naming the field: an empty or over-long
// iid or one with characters outside [A-Za-z0-9._-], a URL that is not
// http://host:port, a role other than prefill, decode or both ("" = both),
// a kv_engine_id over 256 bytes, KV-event endpoints that are not
// tcp://host:port the router can connect to, a replay endpoint without an
// event endpoint.
struct RuntimeEngineSpec {
  std::string iid;
  std::string url;
  std::string role;
  std::string kv_engine_id;
  std::string kv_events;
  std::string kv_events_replay;
};
absl::StatusOr<router::EngineSettings> RuntimeEngine(const RuntimeEngineSpec& spec);

// ALREADY_EXISTS when `engine`'s URL names the same host and port as one
// of `members` (the fleet file's duplicate rule: localhost, 127.0.0.1 and
// [::1] are one host, as are other spellings of one address), naming that
// member; OK otherwise.
absl::Status UniqueEngineUrl(const router::EngineSettings& engine,
                             const std::vector<router::EngineSettings>& members);

}  // namespace narwhal::server

#endif  // NARWHAL_SERVER_ADMIN_RUNTIME_ENGINE_H_
