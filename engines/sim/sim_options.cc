#include "engines/sim/sim_options.h"

#include <cinttypes>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "engines/sim/text_gen.h"

namespace narwhal::sim {

absl::string_view RoleName(SimRole role) {
  switch (role) {
    case SimRole::kPrefill:
      return "prefill";
    case SimRole::kDecode:
      return "decode";
    case SimRole::kBoth:
      break;
  }
  return "both";
}

absl::string_view PolicyName(KvLoadFailurePolicy policy) {
  return policy == KvLoadFailurePolicy::kRecompute ? "recompute" : "fail";
}

std::string EffectiveFingerprint(const SimOptions& options) {
  if (!options.system_fingerprint.empty()) return options.system_fingerprint;
  char hex[9];
  std::snprintf(hex, sizeof(hex), "%08" PRIx32, static_cast<uint32_t>(Fnv1a64(options.engine_id)));
  return absl::StrCat("vllm-", options.vllm_version, "-", hex);
}

std::string AdvertisedHost(const SimOptions& options) {
  if (options.host.empty() || options.host == "0.0.0.0" || options.host == "::" ||
      options.host == "[::]") {
    return "127.0.0.1";
  }
  return options.host;
}

}  // namespace narwhal::sim
