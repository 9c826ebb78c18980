#include "engines/sim/engine_state.h"

#include <utility>

#include "absl/random/random.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace narwhal::sim {

double NowSeconds() { return absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()); }

std::string RandomHex(int n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  thread_local absl::BitGen gen;
  std::string hex(n > 0 ? n : 0, '0');
  for (char& c : hex) c = kDigits[absl::Uniform(gen, 0, 16)];
  return hex;
}

EngineState::EngineState(SimOptions opts)
    : options(std::move(opts)),
      fingerprint(EffectiveFingerprint(options)),
      advertised_host(AdvertisedHost(options)),
      created(absl::ToUnixSeconds(absl::Now())),
      log(options.engine_id),
      kv(options.kv_lease_s, &NowSeconds),
      prefix_cache(static_cast<size_t>(options.prefix_cache_blocks), options.block_size),
      prefill_lanes(options.prefill_lanes) {}

}  // namespace narwhal::sim
