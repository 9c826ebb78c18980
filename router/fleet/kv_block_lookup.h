// KvBlockLookup: what placement asks of the engines' KV-event indexes
// (router/fleet/kv_subscriber.h implements it; a test may stand in).
#ifndef NARWHAL_ROUTER_FLEET_KV_BLOCK_LOOKUP_H_
#define NARWHAL_ROUTER_FLEET_KV_BLOCK_LOOKUP_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace narwhal::router {

class KvBlockLookup {
 public:
  virtual ~KvBlockLookup() = default;
  // How many of `tokens`' leading blocks engine `iid` holds: 0 for an engine
  // without a subscription or cold (never warm by assumption). Any thread;
  // never waits on a publisher.
  virtual size_t LeadingBlocks(const std::string& iid, std::span<const uint32_t> tokens) const = 0;
};

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_FLEET_KV_BLOCK_LOOKUP_H_
