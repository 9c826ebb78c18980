// serving.api_keys (SPEC §16, tenants): each entry's name, the source of its
// key (an env var or a file, exactly one) and its limits, checked and its
// key read when the fleet file is loaded — at start-up and at each reload,
// so a rotated key file takes effect with the next reload.
//
// A key must be non-empty and at most 4 KiB, printable ASCII without spaces
// (it travels in an `Authorization: Bearer` header), and no two tenants may
// share one (the tenant a request belongs to must be unambiguous). Errors
// name the entry and the variable or file, never the key.
#ifndef NARWHAL_SERVER_CONFIG_API_KEYS_H_
#define NARWHAL_SERVER_CONFIG_API_KEYS_H_

#include <vector>

#include "narwhal/config/v1/config.pb.h"
#include "router/common/settings.h"
#include "server/config/fields.h"

namespace narwhal::server::config_file {

// Validates `serving.api_keys` of `serving` (`f` is its section). With
// `read_keys`, each key is read from its variable or file; without (a
// running router's effective configuration), keys stay empty.
void ValidateApiKeys(const Fields& f, const config::v1::Serving& serving, bool read_keys,
                     std::vector<router::TenantSettings>* out);

}  // namespace narwhal::server::config_file

#endif  // NARWHAL_SERVER_CONFIG_API_KEYS_H_
