// Step 3 of loading a fleet file, validation, once, from the proto into
// router::Settings: every bound of the schema, the forms of listeners, URLs,
// ids and names, the known connectors, unique engines, the rules relating two
// keys, and the TLS files (server/config/config_loader.h lists them).
#ifndef NARWHAL_SERVER_CONFIG_VALIDATE_H_
#define NARWHAL_SERVER_CONFIG_VALIDATE_H_

#include <set>
#include <string>

#include "narwhal/config/v1/config.pb.h"
#include "router/common/settings.h"
#include "server/config/error_report.h"

namespace narwhal::server::config_file {

struct ValidateOptions {
  // Read and check the files of `tls.*` and `engine.tls.*`, and read the
  // keys of `serving.api_keys`. Off only for a document that is a running
  // router's effective configuration (its files and variables are on its
  // host).
  bool read_tls_files = true;
};

// The settings `config` describes; violations go to *errors (the keys in
// `reported` were reported by the schema check already).
router::Settings Validate(const config::v1::FleetConfig& config,
                          const std::set<std::string>& reported, Errors* errors,
                          const ValidateOptions& options = {});

}  // namespace narwhal::server::config_file

#endif  // NARWHAL_SERVER_CONFIG_VALIDATE_H_
