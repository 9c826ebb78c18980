// ConfigReloader: the live reload of the fleet file (SPEC §13, B20).
//
// SIGHUP, a content change of the `--config` file (polled every
// membership.config_poll_s: a Kubernetes ConfigMap update swaps a symlink,
// so the bytes are compared, server/config/config_file.h) and the admin
// ReloadConfig RPC all come here. The file is read and validated whole, as
// at start-up; an invalid file, or one that changes a key that needs a
// restart (router/common/settings_diff.h), changes nothing: one error log
// line naming the key path, narwhal_config_reloads_total{result="rejected"},
// and the error in the answer (and in GetConfig's `_reload`). A valid file
// is applied at once: a new config generation (narwhal_config_generation)
// for every request admitted from then on, the fleet's settings, its file
// engines reconciled by iid (B21: unchanged engines keep every state), the
// DNS groups it names, and one log line listing the changes. Requests in
// flight keep the generation they were admitted under.
//
// Thread-safe: reloads run one at a time.
#ifndef NARWHAL_SERVER_CONFIG_CONFIG_RELOAD_H_
#define NARWHAL_SERVER_CONFIG_CONFIG_RELOAD_H_

#include <condition_variable>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "router/common/live_settings.h"
#include "router/common/metrics.h"
#include "router/fleet/fleet_admin.h"
#include "server/admin/admin_service.h"
#include "server/config/config_file.h"

namespace narwhal::server {

class ConfigReloader {
 public:
  // What a new generation changes besides the fleet and the live settings
  // (the router's retry budget, the engine client, the doors, DNS groups).
  using Apply = std::function<void(const router::Settings& settings)>;
  // The command line's listener overrides, applied to every file read.
  using Overrides = std::function<void(router::Settings* settings)>;

  // `file` is the one start-up read (its content is the baseline the poll
  // compares with).
  ConfigReloader(ConfigFile file, router::LiveSettings& live, router::FleetAdmin& fleet,
                 router::Metrics* metrics, Overrides overrides, Apply apply);
  ~ConfigReloader();  // Stop()
  ConfigReloader(const ConfigReloader&) = delete;
  ConfigReloader& operator=(const ConfigReloader&) = delete;

  // Reloads now; `trigger` ("SIGHUP", "file change", "admin") is logged.
  ReloadAnswer Reload(const std::string& trigger);

  // The outcome of the last reload, for GetConfig's `_reload`:
  // {"generation", "last_result", "last_error", "last_trigger"}.
  nlohmann::json Status() const;

  // Polls the file every membership.config_poll_s (of the generation in
  // force; 0 = no polling) on a thread of its own, until Stop().
  void StartPolling();
  void Stop();

 private:
  void Poll();

  ConfigFile file_;
  router::LiveSettings& live_;
  router::FleetAdmin& fleet_;
  router::Metrics* metrics_;
  const Overrides overrides_;
  const Apply apply_;

  std::mutex reload_mu_;  // one reload at a time
  mutable std::mutex status_mu_;
  nlohmann::json status_;

  std::mutex poll_mu_;
  std::condition_variable poll_cv_;
  bool stop_ = false;
  std::thread poller_;
};

}  // namespace narwhal::server

#endif  // NARWHAL_SERVER_CONFIG_CONFIG_RELOAD_H_
