// The simulator's prefix cache (engines/sim/prefix_cache): block matching,
// LRU capacity, the cached-token count and its counters; the prefill lanes.
#include <gtest/gtest.h>

#include <string>

#include "engines/sim/prefill_lanes.h"
#include "engines/sim/prefix_cache.h"

namespace narwhal::sim {
namespace {

std::string Text(const std::string& tag, size_t blocks) {
  std::string text;
  while (text.size() < blocks * PrefixCache::kBlockChars) text += tag + " system prompt; ";
  text.resize(blocks * PrefixCache::kBlockChars);
  return text;
}

int Tokens(const std::string& text) { return static_cast<int>((text.size() + 3) / 4); }

TEST(SimPrefixCacheTest, OffCachesNothing) {
  PrefixCache cache(0);
  const std::string a = Text("a", 8);
  EXPECT_EQ(cache.LookupAndStore(a, Tokens(a)), 0);
  EXPECT_EQ(cache.LookupAndStore(a, Tokens(a)), 0);
  EXPECT_FALSE(cache.Stats()["enabled"].get<bool>());
}

TEST(SimPrefixCacheTest, SharedPrefixIsCachedInWholeBlocks) {
  PrefixCache cache(100);
  const std::string system = Text("a", 8);  // 8 blocks, 128 tokens
  const std::string q1 = system + " what is a narwhal?";
  const std::string q2 = system + " where do narwhals live?";
  EXPECT_EQ(cache.LookupAndStore(q1, Tokens(q1)), 0);  // cold
  const int cached = cache.LookupAndStore(q2, Tokens(q2));
  EXPECT_EQ(cached, 8 * 64 * Tokens(q2) / static_cast<int>(q2.size()));
  EXPECT_GE(cached, 120);
  // The same prompt again: all but the last token at most.
  const std::string exact = Text("b", 4);
  cache.LookupAndStore(exact, Tokens(exact));
  EXPECT_EQ(cache.LookupAndStore(exact, Tokens(exact)), Tokens(exact) - 1);
  const nlohmann::json stats = cache.Stats();
  EXPECT_EQ(stats["lookups"], 4);
  EXPECT_EQ(stats["hits"], 2);
  EXPECT_EQ(stats["cached_tokens"].get<int64_t>(), cached + Tokens(exact) - 1);
  EXPECT_EQ(stats["computed_tokens"].get<int64_t>(),
            stats["prompt_tokens"].get<int64_t>() - stats["cached_tokens"].get<int64_t>());
  EXPECT_GT(stats["hit_rate"].get<double>(), 0.3);
  cache.Reset();
  EXPECT_EQ(cache.Stats()["blocks"], 0);
  EXPECT_EQ(cache.LookupAndStore(q1, Tokens(q1)), 0);
}

TEST(SimPrefixCacheTest, LeastRecentlyUsedPrefixIsEvicted) {
  PrefixCache cache(16);
  const std::string a = Text("a", 8);
  const std::string b = Text("b", 8);
  const std::string c = Text("c", 8);
  cache.LookupAndStore(a, Tokens(a));
  cache.LookupAndStore(b, Tokens(b));
  cache.LookupAndStore(a, Tokens(a));  // a most recent
  cache.LookupAndStore(c, Tokens(c));  // evicts b
  EXPECT_EQ(cache.Stats()["blocks"], 16);
  EXPECT_GT(cache.LookupAndStore(a, Tokens(a)), 0);
  EXPECT_EQ(cache.LookupAndStore(b, Tokens(b)), 0);
}

TEST(SimPrefixCacheTest, DeterministicAcrossInstances) {
  PrefixCache one(100), two(100);
  const std::string a = Text("a", 8) + " tail";
  one.LookupAndStore(a, Tokens(a));
  two.LookupAndStore(a, Tokens(a));
  EXPECT_EQ(one.LookupAndStore(a, Tokens(a)), two.LookupAndStore(a, Tokens(a)));
  EXPECT_EQ(one.Stats().dump(), two.Stats().dump());
}

}  // namespace
}  // namespace narwhal::sim

namespace narwhal::sim {
namespace {

TEST(SimPrefillLanesTest, PrefillsQueueForTheirLanes) {
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  PrefillLanes unlimited(0);
  EXPECT_EQ(unlimited.Book(t0, absl::Milliseconds(30)), absl::Milliseconds(30));
  EXPECT_EQ(unlimited.Book(t0, absl::Milliseconds(30)), absl::Milliseconds(30));
  PrefillLanes one(1);
  EXPECT_EQ(one.Book(t0, absl::Milliseconds(30)), absl::Milliseconds(30));
  EXPECT_EQ(one.Book(t0, absl::Milliseconds(10)), absl::Milliseconds(40));  // waits for the first
  EXPECT_EQ(one.Book(t0 + absl::Milliseconds(100), absl::Milliseconds(5)), absl::Milliseconds(5));
  PrefillLanes two(2);
  EXPECT_EQ(two.Book(t0, absl::Milliseconds(30)), absl::Milliseconds(30));
  EXPECT_EQ(two.Book(t0, absl::Milliseconds(30)), absl::Milliseconds(30));
  EXPECT_EQ(two.Book(t0, absl::Milliseconds(30)), absl::Milliseconds(60));
}

}  // namespace
}  // namespace narwhal::sim
