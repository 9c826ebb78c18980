#include "engines/json_limits.h"

#include <malloc.h>

#include <string>

#include "gtest/gtest.h"

namespace narwhal::engines {
namespace {

std::string Nested(int depth) {
  return std::string(depth, '[') + std::string(depth, ']');
}

// `item` repeated `n` times as the elements of an array.
std::string ArrayOf(const std::string& item, size_t n) {
  std::string s = "[";
  s.reserve(n * (item.size() + 1) + 2);
  for (size_t i = 0; i < n; ++i) {
    if (i > 0) s += ',';
    s += item;
  }
  return s + "]";
}

TEST(JsonLimitsTest, DepthLimit) {
  EXPECT_TRUE(JsonDepthWithin(Nested(kMaxJsonDepth)));
  EXPECT_FALSE(JsonDepthWithin(Nested(kMaxJsonDepth + 1)));
  EXPECT_TRUE(JsonDepthWithin(R"({"a":[{"b":"[[[[[[[["}]})", 3));
  EXPECT_TRUE(JsonDepthWithin(R"({"a":"\"[[[["})", 1));
  EXPECT_FALSE(JsonDepthWithin(R"({"a":[{}]})", 2));
}

// Closing brackets before any opening one (a malformed document) leave no
// container open below the top: what follows is counted from there, never
// stored below the first level (it used to index the container bitset at
// -1: an out-of-bounds write on any client body or engine answer starting
// "}}{").
TEST(JsonLimitsTest, UnbalancedClosersNeverTakeTheDepthBelowZero) {
  for (const char* text : {"}}{", "]]]][", "}]{\"a\":[1]}", "}}}}{}{", "]}{,\"k\":1}"}) {
    SCOPED_TRACE(text);
    EXPECT_EQ(CheckJson(text), JsonVerdict::kWithin);
    EXPECT_TRUE(ParseJson(text).is_discarded());
  }
  // Closers do not buy extra depth either.
  const std::string deep = std::string(200, '}') + std::string(kMaxJsonDepth + 1, '[');
  EXPECT_EQ(CheckJson(deep), JsonVerdict::kTooDeep);
  EXPECT_FALSE(JsonDepthWithin(deep));
}

TEST(JsonLimitsTest, ParsesOrDiscards) {
  EXPECT_EQ(ParseJson(R"({"a":[1,2]})")["a"][1], 2);
  EXPECT_TRUE(ParseJson("{nope").is_discarded());
  EXPECT_TRUE(ParseJson(Nested(100000)).is_discarded());
  EXPECT_FALSE(ParseJson(Nested(10)).is_discarded());
}

TEST(JsonLimitsTest, CostCountsEveryKindOfNode) {
  EXPECT_EQ(JsonParsedCost("1"), JsonNodeCost(JsonNode::kScalar));
  EXPECT_EQ(JsonParsedCost("[]"), JsonNodeCost(JsonNode::kArray));
  EXPECT_EQ(JsonParsedCost("{}"), JsonNodeCost(JsonNode::kObject));
  EXPECT_EQ(JsonParsedCost("[1, true ,null,-2.5e3]"),
            JsonNodeCost(JsonNode::kArray) + 4 * JsonNodeCost(JsonNode::kScalar));
  // A key is a member; a string value is a value; a long one owns its bytes.
  const std::string long_text(100, 'x');
  EXPECT_EQ(JsonParsedCost(R"({"k":"v","long":")" + long_text + R"("})"),
            JsonNodeCost(JsonNode::kObject) + 2 * JsonNodeCost(JsonNode::kMember) +
                JsonNodeCost(JsonNode::kString, 1) + JsonNodeCost(JsonNode::kString, 100));
  EXPECT_GT(JsonNodeCost(JsonNode::kString, 100), JsonNodeCost(JsonNode::kString, 1) + 100);
  // Brackets, commas and quotes inside strings are text.
  EXPECT_EQ(JsonParsedCost(R"(["{[,\"]}"])"),
            JsonNodeCost(JsonNode::kArray) + JsonNodeCost(JsonNode::kString, 8));
  // Keys of an object inside an array after a comma are keys.
  EXPECT_EQ(JsonParsedCost(R"([{"a":1},{"b":2}])"),
            JsonNodeCost(JsonNode::kArray) + 2 * JsonNodeCost(JsonNode::kObject) +
                2 * JsonNodeCost(JsonNode::kMember) + 2 * JsonNodeCost(JsonNode::kScalar));
}

// The issue's body: 4 MiB of empty objects in a pass-through field cost
// about 40 times their size once parsed; refused before parsing.
TEST(JsonLimitsTest, EmptyObjectsOverTheCostBoundAreRefused) {
  const std::string body =
      R"({"model":"m","prompt":"hi","x":)" + ArrayOf("{}", (4u << 20) / 3) + "}";
  EXPECT_EQ(CheckJson(body), JsonVerdict::kTooCostly);
  EXPECT_TRUE(ParseJson(body).is_discarded());
  EXPECT_GT(JsonParsedCost(body), 25 * body.size());
  for (const std::string& item :
       {std::string("[]"), std::string(R"("")"), std::string(R"({"a":0})")}) {
    EXPECT_EQ(CheckJson(ArrayOf(item, (4u << 20) / (item.size() + 1))), JsonVerdict::kTooCostly)
        << item;
  }
}

// What real clients send at the same size passes: a long prompt, a prompt
// of token ids, dense small objects of ordinary size (tool schemas).
TEST(JsonLimitsTest, OrdinaryDocumentsOfTheSameSizeAreWithin) {
  const std::string prompt = R"({"model":"m","prompt":")" + std::string(4u << 20, 'a') + R"("})";
  EXPECT_EQ(CheckJson(prompt), JsonVerdict::kWithin);
  EXPECT_EQ(CheckJson(ArrayOf("15342", (4u << 20) / 6)), JsonVerdict::kWithin);
  EXPECT_EQ(CheckJson(ArrayOf(R"({"type":"string","description":"a field"})", 4000)),
            JsonVerdict::kWithin);
}

TEST(JsonLimitsTest, ExplicitBoundAndWording) {
  const std::string doc = ArrayOf("{}", 100);
  EXPECT_EQ(CheckJson(doc, {.max_cost = 1000}), JsonVerdict::kTooCostly);
  EXPECT_EQ(CheckJson(doc, {.max_cost = JsonParsedCost(doc)}), JsonVerdict::kWithin);
  EXPECT_EQ(JsonLimitText(JsonVerdict::kTooCostly, 10, {.max_cost = 1000}),
            "would take more than 1000 bytes of memory once parsed (too many small values)");
  EXPECT_EQ(JsonLimitText(JsonVerdict::kTooDeep, 10), "nests deeper than 128 levels");
  EXPECT_EQ(DefaultJsonCostBound(100), kMaxJsonExpansion * 100 + kJsonCostAllowance);
}

size_t HeapInUse() {
  const struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
}

// The estimate is what a parse really takes (within a factor that keeps the
// bound honest), measured with glibc's allocator statistics. Skipped where
// malloc is not glibc's (sanitizer builds).
TEST(JsonLimitsTest, EstimateTracksTheParsedHeap) {
  for (const std::string& item :
       {std::string("{}"), std::string("[]"), std::string("12345"), std::string(R"("")"),
        std::string(R"({"role":"user","content":"hello there, how are you"})")}) {
    const std::string doc = ArrayOf(item, 100000);
    const size_t before = HeapInUse();
    nlohmann::json parsed = ParseJson(doc, {.max_cost = static_cast<size_t>(-1)});
    const size_t after = HeapInUse();
    ASSERT_FALSE(parsed.is_discarded());
    if (after <= before) GTEST_SKIP() << "no glibc heap statistics here";
    const double measured = static_cast<double>(after - before);
    const double estimate = static_cast<double>(JsonParsedCost(doc));
    EXPECT_GT(estimate, 0.7 * measured) << item;
    EXPECT_LT(estimate, 1.6 * measured) << item;
  }
}

}  // namespace
}  // namespace narwhal::engines
