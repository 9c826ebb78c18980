// What the soak's clients check of the generated text they receive: it is
// well-formed UTF-8 (the router repairs engine text that is not, SPEC §12),
// and whether it carries U+FFFD (narwhal-sim's invalid_text fault, repaired).
#ifndef NARWHAL_TESTS_SOAK_TEXT_CHECK_H_
#define NARWHAL_TESTS_SOAK_TEXT_CHECK_H_

#include <cstddef>
#include <string_view>

#include "tests/soak/request_record.h"

namespace narwhal::soak {

// Well-formed UTF-8 (RFC 3629: no overlongs, no surrogates, at most U+10FFFF).
inline bool WellFormedUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      n = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
      n = 2;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 3;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return false;
    }
    for (size_t k = 1; k <= n; ++k) {
      if (i + k >= s.size()) return false;
      const unsigned char b = static_cast<unsigned char>(s[i + k]);
      if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) return false;
    }
    i += n + 1;
  }
  return true;
}

// Records what `text` (a piece of generated text) says about the response.
inline void CheckText(std::string_view text, RequestRecord* r) {
  if (!WellFormedUtf8(text)) r->invalid_utf8 = true;
  if (text.find("\xEF\xBF\xBD") != std::string_view::npos) r->repaired_text = true;
}

}  // namespace narwhal::soak

#endif  // NARWHAL_TESTS_SOAK_TEXT_CHECK_H_
