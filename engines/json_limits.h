// Bounded JSON reading for every document that comes from outside (clients,
// engines, config files).
//
// Two bounds apply before a document is parsed:
//   - nesting depth: nlohmann's parser is iterative, but copying and dumping
//     a value recurse, so a deeply nested document would overflow a thread's
//     stack wherever it is copied later;
//   - parsed cost: a small document can expand many times over once parsed
//     (each empty object `{}` costs about 85 bytes of heap as a
//     nlohmann::json, 28 times its 3 bytes of text), so a 4 MiB body could
//     take 167 MB for its whole life. The scan estimates the heap a
//     nlohmann::json of the document takes (JsonParsedCost) and refuses
//     documents that would take more than kMaxJsonExpansion times their size
//     plus kJsonCostAllowance (DefaultJsonCostBound).
// Both are checked by one linear scan that does not validate the JSON.
#ifndef NARWHAL_ENGINES_JSON_LIMITS_H_
#define NARWHAL_ENGINES_JSON_LIMITS_H_

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace narwhal::engines {

// The deepest nesting of arrays and objects accepted in any JSON input.
// OpenAI bodies (tool schemas included) and vLLM responses stay far below.
inline constexpr int kMaxJsonDepth = 128;

// The parsed-cost bound: a document may take kMaxJsonExpansion times its
// size plus kJsonCostAllowance bytes once parsed. Prompt text costs about
// its size; a list of token ids about 3-5 times; dense small objects (tool
// schemas, logprobs) 10-15 times, which the allowance covers for documents
// of ordinary size. Documents made of empty containers or empty strings
// (20-30 times) are what it refuses.
inline constexpr size_t kMaxJsonExpansion = 8;
inline constexpr size_t kJsonCostAllowance = 8u << 20;  // 8 MiB
size_t DefaultJsonCostBound(size_t text_bytes);

struct JsonBounds {
  int max_depth = kMaxJsonDepth;
  // Estimated parsed bytes; 0 = DefaultJsonCostBound(the document's size).
  size_t max_cost = 0;
};

enum class JsonVerdict { kWithin, kTooDeep, kTooCostly };

// Checks `text` against `bounds` in one pass (brackets inside strings do not
// count). Does not validate the JSON. `*cost`, when given, receives the
// estimated parsed cost (as far as the scan went).
JsonVerdict CheckJson(std::string_view text, const JsonBounds& bounds = {}, size_t* cost = nullptr);

// The estimated heap bytes of `text` parsed into a nlohmann::json
// (calibrated on glibc's allocator and nlohmann 3.11: 20 per value, 64 more
// per object, 32 per array, 48 plus the length per string longer than the
// small-string buffer, 96 per object member).
size_t JsonParsedCost(std::string_view text);

// The same model node by node, for documents built from another form (a
// gRPC Struct): what one node of `kind` costs, with `length` the bytes of a
// string or of a member's key.
enum class JsonNode { kScalar, kString, kObject, kArray, kMember };
size_t JsonNodeCost(JsonNode kind, size_t length = 0);

// True when no array or object in `text` nests deeper than `max_depth`.
bool JsonDepthWithin(std::string_view text, int max_depth = kMaxJsonDepth);

// The parsed document, or a discarded value when `text` is not JSON or
// breaks `bounds`. Never throws.
nlohmann::json ParseJson(std::string_view text, const JsonBounds& bounds = {});
// The same for `text` that CheckJson() already found within its bounds: the
// parse only, without scanning the text a second time.
nlohmann::json ParseCheckedJson(std::string_view text);

// "nests deeper than 128 levels": the shared wording of a depth refusal.
std::string DepthLimitText(int max_depth = kMaxJsonDepth);
// "would take more than N bytes once parsed": the wording of a cost refusal
// of a document of `text_bytes` bytes (with `max_cost` as in JsonBounds).
std::string CostLimitText(size_t text_bytes, size_t max_cost = 0);
// The wording of `verdict` (empty for kWithin).
std::string JsonLimitText(JsonVerdict verdict, size_t text_bytes, const JsonBounds& bounds = {});

}  // namespace narwhal::engines

#endif  // NARWHAL_ENGINES_JSON_LIMITS_H_
