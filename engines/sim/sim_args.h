// Command line of the narwhal-sim binary:
//
//   narwhal-sim --port N [--host H] --engine-id ID [--model NAME]
//     [--role prefill|decode|both] [--prefill-ms-per-1k-tokens X]
//     [--token-interval-ms X] [--kv-transfer-ms X] [--kv-lease-s X]
//     [--max-silence-s X] [--threads N] [--vllm-version V]
//     [--max-model-len N] [--fingerprint S]
//     [--kv-load-failure-policy fail|recompute] [--api-key-env VAR]
//     [--exit-on-stdin-eof]
//
// Values may follow as the next argument or after '='. --api-key-env names
// an environment variable holding the API key (it must be set and
// non-empty). --exit-on-stdin-eof makes the engine stop when its standard
// input closes, so a parent that dies takes the engine with it.
#ifndef NARWHAL_ENGINES_SIM_SIM_ARGS_H_
#define NARWHAL_ENGINES_SIM_SIM_ARGS_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engines/sim/sim_options.h"

namespace narwhal::sim {

struct SimArgs {
  SimOptions options;
  bool exit_on_stdin_eof = false;
  bool help = false;
  bool version = false;  // --version
};

// Reads an environment variable; returns false when unset.
using EnvLookup = std::function<bool(const std::string& name, std::string* value)>;

// Parses the arguments after the program name. Errors name the flag.
absl::StatusOr<SimArgs> ParseSimArgs(const std::vector<std::string>& args, const EnvLookup& env);

// The usage text printed for --help and after an argument error.
const char* SimUsage();

}  // namespace narwhal::sim

#endif  // NARWHAL_ENGINES_SIM_SIM_ARGS_H_
