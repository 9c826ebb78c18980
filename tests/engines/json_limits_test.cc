#include "engines/json_limits.h"

#include <string>

#include "gtest/gtest.h"

namespace narwhal::engines {
namespace {

std::string Nested(int depth) {
  return std::string(depth, '[') + std::string(depth, ']');
}

TEST(JsonLimitsTest, DepthLimit) {
  EXPECT_TRUE(JsonDepthWithin(Nested(kMaxJsonDepth)));
  EXPECT_FALSE(JsonDepthWithin(Nested(kMaxJsonDepth + 1)));
  EXPECT_TRUE(JsonDepthWithin(R"({"a":[{"b":"[[[[[[[["}]})", 3));
  EXPECT_TRUE(JsonDepthWithin(R"({"a":"\"[[[["})", 1));
  EXPECT_FALSE(JsonDepthWithin(R"({"a":[{}]})", 2));
}

TEST(JsonLimitsTest, ParsesOrDiscards) {
  EXPECT_EQ(ParseJson(R"({"a":[1,2]})")["a"][1], 2);
  EXPECT_TRUE(ParseJson("{nope").is_discarded());
  EXPECT_TRUE(ParseJson(Nested(100000)).is_discarded());
  EXPECT_FALSE(ParseJson(Nested(10)).is_discarded());
}

}  // namespace
}  // namespace narwhal::engines
