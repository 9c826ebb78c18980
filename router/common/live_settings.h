// LiveSettings: the config generation in force (B20). A reload publishes a
// new generation; a request reads the current one once, at admission, and
// keeps it for its whole life (router::Request::config), so a request in
// flight keeps the settings it was admitted under. Lock-free for readers
// (SnapshotSlot).
#ifndef NARWHAL_ROUTER_COMMON_LIVE_SETTINGS_H_
#define NARWHAL_ROUTER_COMMON_LIVE_SETTINGS_H_

#include <cstdint>
#include <memory>

#include "router/common/settings.h"
#include "engines/snapshot_slot.h"

namespace narwhal::router {

// One applied config: its number (1 at start-up, +1 per applied reload) and
// its settings.
struct ConfigGeneration {
  uint64_t number = 1;
  Settings settings;
};

class LiveSettings {
 public:
  explicit LiveSettings(Settings initial);

  // The generation in force. Any thread.
  std::shared_ptr<const ConfigGeneration> Current() const { return slot_.Get(); }
  // Makes `next` the generation in force; returns its number. One caller
  // at a time (the reloader).
  uint64_t Publish(Settings next);

 private:
  engines::SnapshotSlot<ConfigGeneration> slot_;
};

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_COMMON_LIVE_SETTINGS_H_
