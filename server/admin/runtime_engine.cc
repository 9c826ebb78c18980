#include "server/admin/runtime_engine.h"

#include <algorithm>

#include "engines/engine_failure.h"
#include "server/config/address_rules.h"

namespace narwhal::server {
namespace {

constexpr size_t kMaxIidBytes = 128;
constexpr size_t kMaxKvEngineIdBytes = 256;

}  // namespace

absl::StatusOr<router::EngineSettings> RuntimeEngine(const RuntimeEngineSpec& spec) {
  const std::string& iid = spec.iid;
  const std::string& url = spec.url;
  const std::string& role = spec.role;
  const std::string& kv_engine_id = spec.kv_engine_id;
  if (iid.empty()) return absl::InvalidArgumentError("iid is required");
  if (iid.size() > kMaxIidBytes || !std::all_of(iid.begin(), iid.end(), config_file::IsIidChar)) {
    return absl::InvalidArgumentError("iid must be 1-" + std::to_string(kMaxIidBytes) +
                                      " characters of [A-Za-z0-9._-] (got \"" +
                                      engines::EngineText(iid) + "\")");
  }
  router::EngineSettings e;
  e.iid = iid;
  std::string identity;
  if (std::optional<std::string> why = config_file::EngineUrlError(url, &e.url, &identity)) {
    return absl::InvalidArgumentError("url " + *why + " (got \"" + engines::EngineText(url) +
                                      "\")");
  }
  if (role.empty() || role == "both") {
    e.role = router::Role::kBoth;
  } else if (role == "prefill") {
    e.role = router::Role::kPrefill;
  } else if (role == "decode") {
    e.role = router::Role::kDecode;
  } else {
    return absl::InvalidArgumentError("role must be prefill, decode or both (got \"" +
                                      engines::EngineText(role) + "\")");
  }
  if (kv_engine_id.size() > kMaxKvEngineIdBytes) {
    return absl::InvalidArgumentError("kv_engine_id is over " +
                                      std::to_string(kMaxKvEngineIdBytes) + " bytes");
  }
  e.kv_engine_id = kv_engine_id;
  for (const auto& [name, endpoint] :
       {std::pair<const char*, const std::string*>{"kv_events", &spec.kv_events},
        {"kv_events_replay", &spec.kv_events_replay}}) {
    if (endpoint->empty()) continue;
    if (std::optional<std::string> why = config_file::ZmqEndpointError(*endpoint)) {
      return absl::InvalidArgumentError(std::string(name) + " must be tcp://host:port: " + *why +
                                        " (got \"" + engines::EngineText(*endpoint) + "\")");
    }
  }
  if (!spec.kv_events_replay.empty() && spec.kv_events.empty()) {
    return absl::InvalidArgumentError("kv_events_replay is only valid with kv_events");
  }
  e.kv_events = spec.kv_events;
  e.kv_events_replay = spec.kv_events_replay;
  return e;
}

absl::Status UniqueEngineUrl(const router::EngineSettings& engine,
                             const std::vector<router::EngineSettings>& members) {
  std::string normalized, identity;
  if (config_file::EngineUrlError(engine.url, &normalized, &identity)) return absl::OkStatus();
  for (const router::EngineSettings& m : members) {
    std::string other_normalized, other;
    if (m.iid == engine.iid || config_file::EngineUrlError(m.url, &other_normalized, &other)) {
      continue;
    }
    if (other == identity) {
      return absl::AlreadyExistsError("url " + engine.url + " is engine " + m.iid + "'s (" + m.url +
                                      "): one engine, one iid");
    }
  }
  return absl::OkStatus();
}

}  // namespace narwhal::server
