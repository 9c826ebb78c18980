// What a reload of the fleet file would change (SPEC §13, B20/B21): a pure
// comparison of the running settings with a candidate, used by the live
// reload (which refuses a candidate that needs a restart and applies the
// rest) and by `narwhal-check --diff`.
//
// Keys are compared value by value and named by their path in the file
// (`serving.max_attempts`, `engine_contract.model`, `discovery.dns_servers`);
// `engine_contract` itself is named when it is pinned in one and not the
// other. Engines are matched by iid, never by position (B21): an iid only in
// the candidate joins, an iid only in the running settings leaves, and an
// iid in both whose url, role, kv_engine_id, dns or port differs is changed
// (the old engine leaves and a new one joins); the rest are unchanged and
// keep their breaker, link, quarantine and cache state. Reordering engines
// changes nothing.
//
// Settings must be ones the loader produced (server/config/config_loader.h); the
// command-line listener overrides of narwhal-serve are part of them, so a
// reload applies them to the candidate before comparing.
#ifndef NARWHAL_ROUTER_COMMON_SETTINGS_DIFF_H_
#define NARWHAL_ROUTER_COMMON_SETTINGS_DIFF_H_

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "router/common/settings.h"

namespace narwhal::router {

// The keys a reload cannot change, as patterns: a key path, or a section
// followed by ".*" for every key in it. The one table; the README's "Live
// reload" section lists the same.
const std::vector<std::string_view>& RestartKeyPatterns();

// Whether a change of the key at `path` needs a restart.
bool NeedsRestart(std::string_view path);

// Every key path DiffSettings compares, in schema order (the engines are
// compared by iid instead).
std::vector<std::string> DiffedKeys();

// An engine whose identity changed: it leaves and joins again.
struct EngineChange {
  std::string iid;
  // What differs, in this order: "url", "role", "kv_engine_id", "dns", "port".
  std::vector<std::string> fields;
};

struct ConfigChange {
  // Changed keys that need a restart, in schema order.
  std::vector<std::string> restart_keys;
  // Other changed keys, in schema order; they apply to requests admitted
  // after the reload.
  std::vector<std::string> changed_keys;
  // Engines by iid: joined in the candidate's order, left in the running
  // order, changed and unchanged in the candidate's order.
  std::vector<std::string> joined;
  std::vector<std::string> left;
  std::vector<EngineChange> changed;
  std::vector<std::string> unchanged;

  bool needs_restart() const { return !restart_keys.empty(); }
  // Nothing would change (unchanged engines aside).
  bool empty() const {
    return restart_keys.empty() && changed_keys.empty() && joined.empty() && left.empty() &&
           changed.empty();
  }

  // One line for the log, e.g. "engines joined p2; left d1; changed p0
  // (url); keys changed serving.max_attempts, recovery.eject_after", with
  // "needs a restart: model, listen.http" first when any; "no change" when
  // empty(). Each list shows at most 16 names, then "and N more".
  std::string Summary() const;

  // The admin answer's form:
  //   {"needs_restart": [...], "keys_changed": [...],
  //    "engines": {"joined": [...], "left": [...],
  //                "changed": [{"iid": "p0", "fields": ["url"]}], "unchanged": [...]}}
  nlohmann::json ToJson() const;

  // Why a reload with this change is refused: "needs a restart: model,
  // listen.http"; "" when it is not.
  std::string RestartRefusal() const;
};

ConfigChange DiffSettings(const Settings& running, const Settings& candidate);

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_COMMON_SETTINGS_DIFF_H_
