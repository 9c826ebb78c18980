#include "engines/sim/json_parse.h"

namespace narwhal::sim {

bool JsonDepthWithin(absl::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false;
  bool escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return false;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return true;
}

nlohmann::json ParseJson(absl::string_view text) {
  if (!JsonDepthWithin(text)) return nlohmann::json::value_t::discarded;
  return nlohmann::json::parse(text.begin(), text.end(), nullptr, false);
}

}  // namespace narwhal::sim
