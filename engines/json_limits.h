// Bounded JSON reading for every document that comes from outside (clients,
// engines, config files): nlohmann's parser is iterative, but copying and
// dumping a value recurse, so a deeply nested document would overflow a
// thread's stack wherever it is copied later. Such documents are refused
// before they are parsed.
#ifndef NARWHAL_ENGINES_JSON_LIMITS_H_
#define NARWHAL_ENGINES_JSON_LIMITS_H_

#include <string_view>

#include <nlohmann/json.hpp>

namespace narwhal::engines {

// The deepest nesting of arrays and objects accepted in any JSON input.
// OpenAI bodies (tool schemas included) and vLLM responses stay far below.
inline constexpr int kMaxJsonDepth = 128;

// True when no array or object in `text` nests deeper than `max_depth`
// (brackets inside strings do not count). Does not validate the JSON.
bool JsonDepthWithin(std::string_view text, int max_depth = kMaxJsonDepth);

// The parsed document, or a discarded value when `text` is not JSON or
// nests deeper than `max_depth`. Never throws.
nlohmann::json ParseJson(std::string_view text, int max_depth = kMaxJsonDepth);

// "nests deeper than 128 levels": the shared wording of a depth refusal.
std::string DepthLimitText(int max_depth = kMaxJsonDepth);

}  // namespace narwhal::engines

#endif  // NARWHAL_ENGINES_JSON_LIMITS_H_
