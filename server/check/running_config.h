// `narwhal-check --diff`: a running router's effective configuration, asked
// through the admin API's GetConfig RPC (SPEC §7) and read back into
// settings, so that DiffSettings (router/common/settings_diff.h) can compare
// a candidate file with it.
#ifndef NARWHAL_SERVER_CHECK_RUNNING_CONFIG_H_
#define NARWHAL_SERVER_CHECK_RUNNING_CONFIG_H_

#include <google/protobuf/struct.pb.h>

#include <string>

#include "absl/status/statusor.h"
#include "router/common/settings.h"

namespace narwhal::server {

// Where and how to reach the admin service.
struct AdminTarget {
  std::string address;       // HOST:PORT of the admin listener
  std::string token;         // the bearer token the admin service requires; "" = none
  std::string tls_root_pem;  // PEM certificates to trust on a TLS listener; "" = plaintext
  double timeout_s = 10;     // bound on the whole call
};

// Asks the router at `target` for its effective configuration. Errors:
// the RPC's failure as "admin HOST:PORT: GetConfig: <code>: <message>"
// (UNAVAILABLE, UNAUTHENTICATED, DEADLINE_EXCEEDED, ...), or an answer that
// is not a fleet configuration ("running config: <key path> ..."). The
// answer is bounded (4 MiB, JSON nesting and cost as any JSON input).
absl::StatusOr<router::Settings> FetchRunningSettings(const AdminTarget& target);

// GetConfig's Struct as the JSON text of a fleet file: integral numbers
// (every number in a Struct is a double) become JSON integers. InvalidArgument
// for a Struct nested deeper than engines/json_limits.h allows or holding a
// number that is not finite.
absl::StatusOr<std::string> EffectiveConfigText(const google::protobuf::Struct& config);

}  // namespace narwhal::server

#endif  // NARWHAL_SERVER_CHECK_RUNNING_CONFIG_H_
