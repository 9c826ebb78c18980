// Membership: where a member of the fleet comes from, the membership
// settings, a due join check and what one membership change did (SPEC §13,
// B20-B25).
#ifndef NARWHAL_ROUTER_FLEET_MEMBERSHIP_H_
#define NARWHAL_ROUTER_FLEET_MEMBERSHIP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "engines/engine_client.h"
#include "router/common/settings.h"

namespace narwhal::router {

// Where a member of the fleet comes from (B25 `source`).
enum class SourceKind { kFile, kDns, kAdmin };
struct MemberSource {
  SourceKind kind = SourceKind::kFile;
  std::string group;  // kDns: the group's iid
  // "file", "dns:<group>", "admin".
  std::string Name() const;
  bool operator==(const MemberSource& o) const { return kind == o.kind && group == o.group; }
};

// What the membership settings of the fleet are (SPEC §13 `membership`).
struct MembershipOptions {
  bool join_checks = true;
  double drain_timeout_s = 30;
  double remember_s = 600;
};

// A joining engine whose join checks are due (B22), marked running.
struct JoinTask {
  engines::EngineTarget target;
  Role role = Role::kBoth;
  uint64_t incarnation = 0;
};

// What one membership change did, by iid.
struct MembershipChange {
  std::vector<std::string> joined;
  std::vector<std::string> left;
  std::vector<std::string> changed;  // left and joined again (a new url, role or kv_engine_id)
  bool empty() const { return joined.empty() && left.empty() && changed.empty(); }
};

// Where a member publishes its KV-cache events (SPEC §14): what the
// subscriber follows. Endpoints change with reloads without the engine
// leaving.
struct KvEndpoint {
  std::string iid;
  std::string events;  // "tcp://host:port"
  std::string replay;  // "" when none
  friend bool operator==(const KvEndpoint&, const KvEndpoint&) = default;
};

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_FLEET_MEMBERSHIP_H_
