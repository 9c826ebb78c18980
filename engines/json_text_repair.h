// Repair of JSON text whose strings are not valid Unicode, as engines emit
// it: a detokenizer cut inside a multi-byte character yields raw bytes that
// are not UTF-8, and Python's json module writes an unpaired surrogate as an
// escape (`\udcff`). Both make the document invalid JSON for a strict parser,
// although the engine meant text. The repair replaces each with U+FFFD, the
// replacement character (as Python's errors="replace" does), so that every
// door of the router shows the same text for the same event.
#ifndef NARWHAL_ENGINES_JSON_TEXT_REPAIR_H_
#define NARWHAL_ENGINES_JSON_TEXT_REPAIR_H_

#include <string>
#include <string_view>

namespace narwhal::engines {

// Writes `text` to `*out` with every ill-formed UTF-8 sequence (each maximal
// subpart of one, as the Unicode standard recommends: truncated, overlong,
// encoded surrogates, past U+10FFFF, stray bytes) replaced by U+FFFD's three
// bytes, and every `\uXXXX` escape of a surrogate that is not part of a
// high-low pair replaced by `\ufffd`. Everything else is copied unchanged;
// the repair does not validate the JSON. True when anything was replaced.
bool RepairJsonText(std::string_view text, std::string* out);

}  // namespace narwhal::engines

#endif  // NARWHAL_ENGINES_JSON_TEXT_REPAIR_H_
