// Invariant checks for the fuzz targets: a failed check prints what broke
// and aborts, which libFuzzer reports as a crash with the input saved.
#ifndef NARWHAL_TESTS_FUZZ_FUZZ_CHECK_H_
#define NARWHAL_TESTS_FUZZ_FUZZ_CHECK_H_

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace narwhal::fuzz {

[[noreturn]] inline void CheckFailed(const char* file, int line, const char* condition,
                                     const std::string& detail) {
  std::fprintf(stderr, "%s:%d: fuzz invariant failed: %s\n", file, line, condition);
  if (!detail.empty()) std::fprintf(stderr, "  %s\n", detail.c_str());
  std::fflush(stderr);
  std::abort();
}

// Bytes made printable for a failure message (escapes, truncated).
inline std::string Printable(std::string_view s, size_t max_chars = 400) {
  std::string out;
  for (const char c : s) {
    if (out.size() >= max_chars) {
      out += "...";
      break;
    }
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f && c != '\\') {
      out += c;
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02X", u);
      out += hex;
    }
  }
  return out;
}

// Well-formed UTF-8 (no overlong forms, surrogates or code points past
// U+10FFFF): what nlohmann's strict dump() and proto3 strings require.
inline bool IsUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      n = 1;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (s.size() - i - 1 < n) return false;  // truncated sequence
    for (size_t k = 1; k <= n; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    static constexpr uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n + 1;
  }
  return true;
}

// A JSON value as text for a failure message; never throws.
inline std::string Show(const nlohmann::json& v) {
  return Printable(v.dump(-1, ' ', true, nlohmann::json::error_handler_t::replace));
}

// A body that is about to be sent to an engine must serialise: dump() with
// the strict error handler throws on invalid UTF-8.
inline bool Serialises(const nlohmann::json& v, std::string* text = nullptr) {
  try {
    std::string s = v.dump();
    if (text != nullptr) *text = std::move(s);
    return true;
  } catch (const nlohmann::json::exception&) {
    return false;
  }
}

}  // namespace narwhal::fuzz

#define FUZZ_CHECK(condition)                                                    \
  do {                                                                           \
    if (!(condition)) ::narwhal::fuzz::CheckFailed(__FILE__, __LINE__, #condition, ""); \
  } while (false)

#define FUZZ_CHECK_MSG(condition, detail)                                                \
  do {                                                                                   \
    if (!(condition)) ::narwhal::fuzz::CheckFailed(__FILE__, __LINE__, #condition, (detail)); \
  } while (false)

#endif  // NARWHAL_TESTS_FUZZ_FUZZ_CHECK_H_
