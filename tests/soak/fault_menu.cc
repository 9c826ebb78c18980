#include "tests/soak/fault_menu.h"

namespace narwhal::soak {
namespace {

using json = nlohmann::json;

int UniformInt(std::mt19937_64& rng, int lo, int hi) {
  return std::uniform_int_distribution<int>(lo, hi)(rng);
}

template <typename T>
T Pick(std::mt19937_64& rng, const std::vector<T>& options) {
  return options[static_cast<size_t>(UniformInt(rng, 0, static_cast<int>(options.size()) - 1))];
}

}  // namespace

const std::vector<std::string>& AllFaultKinds() {
  static const std::vector<std::string> kKinds = {
      "drop_connection",   "delay_headers",       "http_status",
      "silent_before_first_token", "metadata_then_silence", "stall_after_tokens",
      "close_before_done", "done_before_token",   "error_in_stream",
      "no_descriptor",     "descriptor_without_engine_id", "malformed_block_ids",
      "slow_tokens",       "invalid_text",
  };
  return kKinds;
}

json RandomFaultRule(const std::string& kind, std::mt19937_64& rng) {
  json rule = {{"kind", kind}, {"times", UniformInt(rng, 1, 4)}};
  // Kinds that shape a response of either leg run on either; stream kinds
  // on the decode leg (a prefill answer is one JSON body); descriptor kinds
  // on the prefill leg only.
  const std::string any_phase = Pick<std::string>(rng, {"any", "prefill", "decode"});
  if (kind == "drop_connection") {
    rule["phase"] = any_phase;
  } else if (kind == "delay_headers") {
    // Around the decode first-token budget (1.5 s) and under the prefill
    // bound (3 s): some legs only slow, others time out.
    rule["phase"] = any_phase;
    rule["ms"] = UniformInt(rng, 50, 2500);
  } else if (kind == "http_status") {
    rule["phase"] = any_phase;
    rule["status"] = Pick<int>(rng, {400, 408, 429, 500, 502, 503});
    rule["message"] = "soak injected status";
  } else if (kind == "silent_before_first_token") {
    rule["phase"] = Pick<std::string>(rng, {"decode", "decode", "prefill"});
  } else if (kind == "metadata_then_silence") {
    rule["phase"] = "decode";
    rule["chunks"] = UniformInt(rng, 1, 3);
  } else if (kind == "stall_after_tokens") {
    rule["phase"] = "decode";
    rule["tokens"] = UniformInt(rng, 1, 6);
  } else if (kind == "close_before_done") {
    rule["phase"] = "decode";
    rule["tokens"] = UniformInt(rng, 0, 6);
  } else if (kind == "done_before_token") {
    rule["phase"] = "decode";
  } else if (kind == "error_in_stream") {
    rule["phase"] = "decode";
    rule["after_tokens"] = UniformInt(rng, 0, 6);
    rule["code"] = Pick<json>(rng, {json(500), json(502), json(503), json("overloaded")});
    rule["message"] = "soak injected stream error";
  } else if (kind == "slow_tokens") {
    // Mostly slow but within the between-token bound (1.5 s), sometimes
    // beyond it.
    rule["phase"] = "decode";
    rule["interval_ms"] = Pick<int>(rng, {40, 80, 150, 300, 600, 2000});
  } else if (kind == "invalid_text") {
    // A token's text that is not valid Unicode (a raw byte, or a lone
    // surrogate escape): the router relays it repaired with U+FFFD.
    rule["phase"] = "decode";
    rule["at_token"] = UniformInt(rng, 0, 6);
    rule["shape"] = Pick<std::string>(rng, {"raw_byte", "lone_surrogate"});
  } else {  // no_descriptor, descriptor_without_engine_id, malformed_block_ids
    rule["phase"] = "prefill";
  }
  return rule;
}

}  // namespace narwhal::soak
