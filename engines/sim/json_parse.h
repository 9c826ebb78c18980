// Parsing JSON from the network without letting its shape hurt the engine:
// nlohmann's parser is iterative, but copying and dumping a value recurse,
// so deeply nested documents are refused before they are parsed.
#ifndef NARWHAL_ENGINES_SIM_JSON_PARSE_H_
#define NARWHAL_ENGINES_SIM_JSON_PARSE_H_

#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace narwhal::sim {

inline constexpr int kMaxJsonDepth = 128;

// True when no array or object in `text` nests deeper than `max_depth`
// (brackets inside strings do not count). Does not validate the JSON.
bool JsonDepthWithin(absl::string_view text, int max_depth = kMaxJsonDepth);

// The parsed document, or a discarded value when `text` is not JSON or
// nests deeper than kMaxJsonDepth. Never throws.
nlohmann::json ParseJson(absl::string_view text);

}  // namespace narwhal::sim

#endif  // NARWHAL_ENGINES_SIM_JSON_PARSE_H_
