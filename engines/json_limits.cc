#include "engines/json_limits.h"

#include <bitset>
#include <string>

namespace narwhal::engines {
namespace {

// Heap bytes of one nlohmann::json node and what it owns, malloc overhead
// included (measured: 2 x 10^5 empty objects take 85 bytes each, empty
// arrays 53, integers 21 with the array's growth, empty strings 69, members
// of one object 96).
constexpr size_t kValueCost = 20;
constexpr size_t kObjectCost = 64;
constexpr size_t kArrayCost = 32;
constexpr size_t kStringCost = 48;
constexpr size_t kMemberCost = 96;
constexpr size_t kSmallString = 15;      // libstdc++'s small-string buffer
constexpr size_t kStringChunkCost = 17;  // a long string's own allocation

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

size_t StringCost(size_t length) { return length > kSmallString ? length + kStringChunkCost : 0; }

}  // namespace

size_t JsonNodeCost(JsonNode kind, size_t length) {
  switch (kind) {
    case JsonNode::kScalar:
      return kValueCost;
    case JsonNode::kString:
      return kValueCost + kStringCost + StringCost(length);
    case JsonNode::kObject:
      return kValueCost + kObjectCost;
    case JsonNode::kArray:
      return kValueCost + kArrayCost;
    case JsonNode::kMember:
      return kMemberCost + StringCost(length);
  }
  return kValueCost;
}

size_t DefaultJsonCostBound(size_t text_bytes) {
  return kMaxJsonExpansion * text_bytes + kJsonCostAllowance;
}

JsonVerdict CheckJson(std::string_view text, const JsonBounds& bounds, size_t* cost_out) {
  const size_t max_cost =
      bounds.max_cost != 0 ? bounds.max_cost : DefaultJsonCostBound(text.size());
  // Whether each open container is an object; strings right after `{` or
  // `,` inside an object are keys.
  std::bitset<kMaxJsonDepth + 2> is_object;
  const int tracked = static_cast<int>(is_object.size()) - 1;
  int depth = 0;
  size_t cost = 0;
  bool expect_key = false;
  bool in_scalar = false;
  JsonVerdict verdict = JsonVerdict::kWithin;
  const size_t n = text.size();
  for (size_t i = 0; i < n; ++i) {
    const char c = text[i];
    if (c == '"') {
      in_scalar = false;
      size_t j = i + 1;
      while (j < n && text[j] != '"') j += text[j] == '\\' ? 2 : 1;
      const size_t length = j - i - 1;
      cost += JsonNodeCost(expect_key ? JsonNode::kMember : JsonNode::kString, length);
      expect_key = false;
      i = j;
    } else if (c == '{' || c == '[') {
      in_scalar = false;
      if (++depth > bounds.max_depth) {
        verdict = JsonVerdict::kTooDeep;
        break;
      }
      if (depth <= tracked) is_object[depth] = c == '{';
      cost += JsonNodeCost(c == '{' ? JsonNode::kObject : JsonNode::kArray);
      expect_key = c == '{';
    } else if (c == '}' || c == ']') {
      in_scalar = false;
      expect_key = false;
      // A closer with nothing open is malformed (the parser refuses it); the
      // depth never goes below the top level, where it indexes is_object.
      if (depth > 0) --depth;
    } else if (c == ',') {
      in_scalar = false;
      expect_key = depth > 0 && depth <= tracked && is_object[depth];
    } else if (c == ':' || IsSpace(c)) {
      in_scalar = false;
    } else if (!in_scalar) {
      in_scalar = true;  // a number, true, false or null
      cost += JsonNodeCost(JsonNode::kScalar);
    }
    if (cost > max_cost) {
      verdict = JsonVerdict::kTooCostly;
      break;
    }
  }
  if (cost_out != nullptr) *cost_out = cost;
  return verdict;
}

size_t JsonParsedCost(std::string_view text) {
  size_t cost = 0;
  CheckJson(text, JsonBounds{.max_depth = 1 << 30, .max_cost = static_cast<size_t>(-1)}, &cost);
  return cost;
}

bool JsonDepthWithin(std::string_view text, int max_depth) {
  return CheckJson(text, JsonBounds{.max_depth = max_depth, .max_cost = static_cast<size_t>(-1)}) !=
         JsonVerdict::kTooDeep;
}

nlohmann::json ParseJson(std::string_view text, const JsonBounds& bounds) {
  if (CheckJson(text, bounds) != JsonVerdict::kWithin) return nlohmann::json::value_t::discarded;
  return nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
}

nlohmann::json ParseCheckedJson(std::string_view text) {
  return nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
}

std::string DepthLimitText(int max_depth) {
  return "nests deeper than " + std::to_string(max_depth) + " levels";
}

std::string CostLimitText(size_t text_bytes, size_t max_cost) {
  const size_t bound = max_cost != 0 ? max_cost : DefaultJsonCostBound(text_bytes);
  return "would take more than " + std::to_string(bound) +
         " bytes of memory once parsed (too many small values)";
}

std::string JsonLimitText(JsonVerdict verdict, size_t text_bytes, const JsonBounds& bounds) {
  switch (verdict) {
    case JsonVerdict::kWithin:
      return "";
    case JsonVerdict::kTooDeep:
      return DepthLimitText(bounds.max_depth);
    case JsonVerdict::kTooCostly:
      return CostLimitText(text_bytes, bounds.max_cost);
  }
  return "";
}

}  // namespace narwhal::engines
