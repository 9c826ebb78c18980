// The client API key comparison both inference doors use (server/api_key):
// exact bytes, no early exit on a length mismatch, and the Bearer scheme.
#include "server/api_key.h"

#include <gtest/gtest.h>

#include <string>

namespace narwhal::server {
namespace {

TEST(ApiKeyTest, EqualStringsMatch) {
  EXPECT_TRUE(ConstantTimeEquals("s3cret-key", "s3cret-key"));
  const std::string long_key(4096, 'k');
  EXPECT_TRUE(ConstantTimeEquals(long_key, std::string(4096, 'k')));
}

TEST(ApiKeyTest, FirstOrLastByteDifferenceIsUnequal) {
  EXPECT_FALSE(ConstantTimeEquals("s3cret-key", "x3cret-key"));
  EXPECT_FALSE(ConstantTimeEquals("s3cret-key", "s3cret-kez"));
  EXPECT_FALSE(ConstantTimeEquals("s3cret-key", "S3cret-key"));
}

TEST(ApiKeyTest, DifferentLengthsAreUnequal) {
  EXPECT_FALSE(ConstantTimeEquals("s3cret-key", "s3cret-ke"));
  EXPECT_FALSE(ConstantTimeEquals("s3cret-ke", "s3cret-key"));
  // A prefix padded with what reads as 0 past the end is still unequal.
  EXPECT_FALSE(ConstantTimeEquals(std::string("key\0", 4), "key"));
  EXPECT_FALSE(ConstantTimeEquals("key", std::string("key\0\0", 5)));
}

TEST(ApiKeyTest, EmptyInputs) {
  EXPECT_TRUE(ConstantTimeEquals("", ""));
  EXPECT_FALSE(ConstantTimeEquals("", "k"));
  EXPECT_FALSE(ConstantTimeEquals("k", ""));
}

TEST(ApiKeyTest, BearerNeedsTheSchemeAndTheExactKey) {
  EXPECT_TRUE(BearerMatches("Bearer s3cret-key", "s3cret-key"));
  EXPECT_FALSE(BearerMatches("Bearer s3cret-kez", "s3cret-key"));
  EXPECT_FALSE(BearerMatches("Bearer  s3cret-key", "s3cret-key"));
  EXPECT_FALSE(BearerMatches("Bearer\ts3cret-key", "s3cret-key"));
  EXPECT_FALSE(BearerMatches("Bearer s3cret-ke", "s3cret-key"));
  EXPECT_FALSE(BearerMatches("s3cret-key", "s3cret-key"));
  EXPECT_FALSE(BearerMatches("Basic s3cret-key", "s3cret-key"));
  EXPECT_FALSE(BearerMatches("bearer s3cret-key", "s3cret-key"));
  EXPECT_FALSE(BearerMatches("", "s3cret-key"));
  EXPECT_FALSE(BearerMatches("Bearer ", "s3cret-key"));
  // An empty key is "no authentication": callers never ask, and it matches
  // nothing if they do.
  EXPECT_FALSE(BearerMatches("Bearer ", ""));
}

// One rule for both doors: whitespace around the value is not part of it
// (the HTTP parser drops it; gRPC metadata keeps it, and it is dropped here).
TEST(ApiKeyTest, WhitespaceAroundTheValueIsNotPartOfIt) {
  EXPECT_TRUE(BearerMatches("Bearer s3cret-key ", "s3cret-key"));
  EXPECT_TRUE(BearerMatches("  Bearer s3cret-key", "s3cret-key"));
  EXPECT_TRUE(BearerMatches("\tBearer s3cret-key \t", "s3cret-key"));
  EXPECT_FALSE(BearerMatches("Bearer s3cret-key x", "s3cret-key"));
  EXPECT_FALSE(BearerMatches("   ", "s3cret-key"));
  EXPECT_FALSE(BearerMatches(" Bearer  ", "s3cret-key"));
}

}  // namespace
}  // namespace narwhal::server
