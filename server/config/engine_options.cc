#include "server/config/engine_options.h"

#include <cstdlib>

namespace narwhal::server {

std::string EnvOrEmpty(const std::string& name) {
  if (name.empty()) return "";
  const char* value = std::getenv(name.c_str());
  return value == nullptr ? "" : value;
}

engines::HttpEngineClientOptions EngineClientOptions(const router::Settings& settings) {
  engines::HttpEngineClientOptions o;
  o.first_token_timeout_s = settings.engine.first_token_timeout_s;
  o.decode_read_timeout_s = settings.engine.decode_read_timeout_s;
  o.connect_timeout_s = settings.engine.connect_timeout_s;
  o.connector = settings.engine.connector;
  // The loader accepted only known policy names.
  engines::ParseRemoteHostPolicy(settings.handoff.remote_host, &o.remote_host_policy);
  o.api_key = EnvOrEmpty(settings.engine.api_key_env);
  o.tls = engines::EngineTlsOptions{.ca_file = settings.engine.tls.ca_file,
                                    .cert_file = settings.engine.tls.cert_file,
                                    .key_file = settings.engine.tls.key_file,
                                    .server_name = settings.engine.tls.server_name};
  return o;
}

}  // namespace narwhal::server
