#include "server/config/error_report.h"

#include <google/protobuf/descriptor.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"

#include <nlohmann/json.hpp>

namespace narwhal::server::config_file {

using json = nlohmann::json;

// A JSON value as it would appear in the file, ASCII-only and truncated, so it
// is safe to put in a one-line log message.
std::string Show(const json& value) {
  std::string text = value.dump(-1, ' ', /*ensure_ascii=*/true, json::error_handler_t::replace);
  if (text.size() > kMaxShownChars) text = text.substr(0, kMaxShownChars - 3) + "...";
  return text;
}

std::string Quote(const std::string& s) { return Show(json(s)); }

// `text` with everything between its scheme ("http://", if any) and its last
// '@' replaced by "***": a URL or address shown without its credentials.
std::string WithoutUserinfo(absl::string_view text) {
  const size_t at = text.rfind('@');
  if (at == absl::string_view::npos) return std::string(text);
  size_t start = text.find("://");
  start = start == absl::string_view::npos || start > at ? 0 : start + 3;
  return absl::StrCat(text.substr(0, start), "***", text.substr(at));
}

// A bound or a configured value: integers without a fraction, else the
// shortest text that reads back as the same double.
std::string FormatNumber(double v) {
  char buf[40];
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    std::snprintf(buf, sizeof buf, "%.0f", v);
    return buf;
  }
  for (const int digits : {6, 15, 17}) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

std::string TypeName(const json& v) {
  if (v.is_number_integer()) return "integer";
  if (v.is_number()) return "number";
  return v.type_name();
}

bool IsAnnotation(std::string_view key) { return !key.empty() && key.front() == '_'; }

std::string JoinPath(const std::string& path, const std::string& key) {
  return path.empty() ? key : absl::StrCat(path, ".", key);
}

// `text` made safe for a one-line log message: bytes outside printable ASCII
// (nlohmann echoes the bytes it last read, which may be anything) become
// \xHH, and the result is truncated.
std::string Printable(const std::string& text) {
  constexpr size_t kMaxChars = 200;
  std::string out;
  for (const char c : text) {
    if (out.size() >= kMaxChars) {
      out += "...";
      break;
    }
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f) {
      out += c;
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02X", u);
      out += hex;
    }
  }
  return out;
}

}  // namespace narwhal::server::config_file
