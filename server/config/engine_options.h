// What the binaries derive from the fleet settings and the environment.
#ifndef NARWHAL_SERVER_CONFIG_ENGINE_OPTIONS_H_
#define NARWHAL_SERVER_CONFIG_ENGINE_OPTIONS_H_

#include <string>

#include "engines/http/http_options.h"
#include "router/common/settings.h"

namespace narwhal::server {

// The value of environment variable `name`; "" when unset or `name` is "".
std::string EnvOrEmpty(const std::string& name);

// The engine adapter's options from `engine.*` (the Bearer token read from
// the variable engine.api_key_env names).
engines::HttpEngineClientOptions EngineClientOptions(const router::Settings& settings);

}  // namespace narwhal::server

#endif  // NARWHAL_SERVER_CONFIG_ENGINE_OPTIONS_H_
