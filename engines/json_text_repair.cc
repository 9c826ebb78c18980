#include "engines/json_text_repair.h"

#include <cstdint>
#include <utility>

#include "engines/engine_failure.h"

namespace narwhal::engines {
namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The code unit of the `\uXXXX` escape at `s[i]` (the backslash), or -1.
int EscapedUnit(std::string_view s, size_t i) {
  if (i + 6 > s.size() || s[i] != '\\' || s[i + 1] != 'u') return -1;
  int unit = 0;
  for (size_t k = i + 2; k < i + 6; ++k) {
    const int h = HexValue(s[k]);
    if (h < 0) return -1;
    unit = unit * 16 + h;
  }
  return unit;
}

bool IsHigh(int unit) { return unit >= 0xD800 && unit <= 0xDBFF; }
bool IsLow(int unit) { return unit >= 0xDC00 && unit <= 0xDFFF; }

}  // namespace

bool RepairJsonText(std::string_view text, std::string* out) {
  std::string escaped;
  escaped.reserve(text.size() + 16);
  bool replaced = false;
  size_t i = 0;
  while (i < text.size()) {
    if (text[i] != '\\' || i + 1 >= text.size()) {
      escaped.push_back(text[i++]);
      continue;
    }
    const int unit = EscapedUnit(text, i);
    if (IsHigh(unit) && IsLow(EscapedUnit(text, i + 6))) {
      escaped.append(text.substr(i, 12));  // a pair: one character
      i += 12;
    } else if (IsHigh(unit) || IsLow(unit)) {
      escaped.append("\\ufffd");
      replaced = true;
      i += 6;
    } else {
      escaped.append(text.substr(i, 2));  // any other escape, or a backslash pair
      i += 2;
    }
  }
  if (IsValidUtf8(escaped)) {
    *out = std::move(escaped);
    return replaced;
  }
  *out = ToValidUtf8(escaped);
  return true;
}

}  // namespace narwhal::engines
