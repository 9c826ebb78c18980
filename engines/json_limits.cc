#include "engines/json_limits.h"

#include <string>

namespace narwhal::engines {

bool JsonDepthWithin(std::string_view text, int max_depth) {
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

nlohmann::json ParseJson(std::string_view text, int max_depth) {
  if (!JsonDepthWithin(text, max_depth)) return nlohmann::json::value_t::discarded;
  return nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
}

std::string DepthLimitText(int max_depth) {
  return "nests deeper than " + std::to_string(max_depth) + " levels";
}

}  // namespace narwhal::engines
