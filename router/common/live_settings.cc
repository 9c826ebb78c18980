#include "router/common/live_settings.h"

#include <utility>

namespace narwhal::router {

LiveSettings::LiveSettings(Settings initial)
    : slot_(std::make_shared<const ConfigGeneration>(ConfigGeneration{1, std::move(initial)})) {}

uint64_t LiveSettings::Publish(Settings next) {
  const uint64_t number = slot_.Get()->number + 1;
  slot_.Publish(std::make_shared<const ConfigGeneration>(ConfigGeneration{number, std::move(next)}));
  return number;
}

}  // namespace narwhal::router
