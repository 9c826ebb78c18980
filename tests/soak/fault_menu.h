// Every narwhal-sim fault kind (engines/sim/fault_rules.h, SPEC §10) and a
// random rule of each, with parameters drawn so that the router sees both
// the timeout-shaped and the other failures of each kind.
#ifndef NARWHAL_TESTS_SOAK_FAULT_MENU_H_
#define NARWHAL_TESTS_SOAK_FAULT_MENU_H_

#include <random>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace narwhal::soak {

// The thirteen kinds, in the order of SPEC §10, then invalid_text.
const std::vector<std::string>& AllFaultKinds();

// A rule {"kind", "phase", "times", ...params} of `kind`; `times` 1..4.
nlohmann::json RandomFaultRule(const std::string& kind, std::mt19937_64& rng);

}  // namespace narwhal::soak

#endif  // NARWHAL_TESTS_SOAK_FAULT_MENU_H_
