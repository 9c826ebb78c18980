#include "server/config/config_reload.h"

#include <chrono>
#include <memory>
#include <utility>

#include "router/common/log.h"
#include "router/common/settings_diff.h"

namespace narwhal::server {
namespace {

using router::LogError;
using router::LogInfo;

// The file engines of `settings` (DNS groups are the DNS groups' own).
std::vector<router::EngineSettings> FileEngines(const router::Settings& settings) {
  std::vector<router::EngineSettings> out;
  for (const router::EngineSettings& e : settings.engines) {
    if (!e.is_dns_group()) out.push_back(e);
  }
  return out;
}

}  // namespace

ConfigReloader::ConfigReloader(ConfigFile file, router::LiveSettings& live,
                               router::FleetAdmin& fleet, router::Metrics* metrics,
                               Overrides overrides, Apply apply)
    : file_(std::move(file)),
      live_(live),
      fleet_(fleet),
      metrics_(metrics),
      overrides_(std::move(overrides)),
      apply_(std::move(apply)),
      status_({{"generation", 1},
               {"last_result", nullptr},
               {"last_error", nullptr},
               {"last_trigger", nullptr}}) {}

ConfigReloader::~ConfigReloader() { Stop(); }

ReloadAnswer ConfigReloader::Reload(const std::string& trigger) {
  std::lock_guard<std::mutex> lock(reload_mu_);
  const std::shared_ptr<const router::ConfigGeneration> running = live_.Current();
  ReloadAnswer answer;
  answer.generation = running->number;
  auto reject = [&](std::string error) {
    answer.applied = false;
    answer.error = std::move(error);
    LogError("config reload (" + trigger + ") rejected, nothing changed: " + answer.error);
    if (metrics_ != nullptr)
      metrics_->config_reloads_total.Add({{"result", "rejected"}}).Increment();
    std::lock_guard<std::mutex> status_lock(status_mu_);
    status_ = {{"generation", answer.generation},
               {"last_result", "rejected"},
               {"last_error", answer.error},
               {"last_trigger", trigger}};
    return answer;
  };
  absl::StatusOr<router::Settings> loaded = file_.Load();
  if (!loaded.ok()) return reject(std::string(loaded.status().message()));
  router::Settings candidate = std::move(*loaded);
  if (overrides_) overrides_(&candidate);
  const router::ConfigChange change = router::DiffSettings(running->settings, candidate);
  if (change.needs_restart())
    return reject("config " + file_.path() + ": " + change.RestartRefusal());

  answer.applied = true;
  answer.joined = change.joined;
  answer.left = change.left;
  for (const router::EngineChange& c : change.changed) answer.changed.push_back(c.iid);
  answer.keys_changed = change.changed_keys;
  answer.summary = change.Summary();
  if (!change.empty()) {
    answer.generation = live_.Publish(candidate);
    const router::Settings& applied = live_.Current()->settings;
    fleet_.ApplySettings(std::make_shared<const router::Settings>(applied));
    fleet_.Reconcile(router::MemberSource{router::SourceKind::kFile, ""}, FileEngines(applied));
    if (apply_) apply_(applied);
    if (metrics_ != nullptr)
      metrics_->config_generation.Set(static_cast<double>(answer.generation));
  }
  LogInfo("config reload (" + trigger + ") applied: generation " +
          std::to_string(answer.generation) + ": " + answer.summary);
  if (metrics_ != nullptr) metrics_->config_reloads_total.Add({{"result", "applied"}}).Increment();
  std::lock_guard<std::mutex> status_lock(status_mu_);
  status_ = {{"generation", answer.generation},
             {"last_result", "applied"},
             {"last_error", nullptr},
             {"last_trigger", trigger}};
  return answer;
}

nlohmann::json ConfigReloader::Status() const {
  std::lock_guard<std::mutex> lock(status_mu_);
  return status_;
}

void ConfigReloader::StartPolling() {
  std::lock_guard<std::mutex> lock(poll_mu_);
  if (poller_.joinable()) return;
  stop_ = false;
  poller_ = std::thread([this] { Poll(); });
}

void ConfigReloader::Stop() {
  {
    std::lock_guard<std::mutex> lock(poll_mu_);
    stop_ = true;
  }
  poll_cv_.notify_all();
  if (poller_.joinable()) poller_.join();
}

void ConfigReloader::Poll() {
  std::unique_lock<std::mutex> lock(poll_mu_);
  while (!stop_) {
    const double every = live_.Current()->settings.membership.config_poll_s;
    // 0 = SIGHUP (and ReloadConfig) only: look again in a while, in case a
    // reload turns polling on.
    const auto wait =
        std::chrono::milliseconds(static_cast<long long>((every > 0 ? every : 5.0) * 1000));
    if (poll_cv_.wait_for(lock, wait, [this] { return stop_; })) return;
    if (every <= 0) continue;
    lock.unlock();
    absl::StatusOr<bool> changed = false;
    {
      std::lock_guard<std::mutex> reload_lock(reload_mu_);  // file_ has one user at a time
      changed = file_.Changed();
    }
    if (changed.ok() && *changed) Reload("file change");
    lock.lock();
  }
}

}  // namespace narwhal::server
