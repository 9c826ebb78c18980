// The simulator's prefix cache (engines/sim/prefix_cache): block matching,
// LRU capacity, the cached-token count and its counters; the prefill lanes.
#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engines/sim/prefill_lanes.h"
#include "engines/sim/prefix_cache.h"
#include "engines/sim/sim_tokenizer.h"

namespace narwhal::sim {
namespace {

// A block of the default 16 tokens, 4 characters each.
constexpr size_t kBlockChars = 64;

std::string Text(const std::string& tag, size_t blocks) {
  std::string text;
  while (text.size() < blocks * kBlockChars) text += tag + " system prompt; ";
  text.resize(blocks * kBlockChars);
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

namespace narwhal::sim {
namespace {

// What the prefix cache tells its sink (the KV-event publisher).
struct SinkEvent {
  std::string kind;
  std::vector<uint64_t> hashes;
  std::optional<uint64_t> parent;
  std::vector<uint32_t> tokens;
};
class SinkRecorder : public BlockSink {
 public:
  void Stored(const std::vector<uint64_t>& hashes, std::optional<uint64_t> parent,
              std::vector<uint32_t> tokens, uint32_t block_size) override {
    EXPECT_EQ(block_size, 16u);
    events.push_back({"stored", hashes, parent, std::move(tokens)});
  }
  void Removed(uint64_t hash) override { events.push_back({"removed", {hash}, {}, {}}); }
  void Cleared() override { events.push_back({"cleared", {}, {}, {}}); }
  std::vector<SinkEvent> events;
};

TEST(SimBlockEventsTest, NewBlocksAreToldInChainRunsWithTheirTokens) {
  PrefixCache cache(100);
  SinkRecorder sink;
  cache.SetSink(&sink);
  const std::string a = Text("a", 3) + " tail";  // 3 full blocks and a partial one
  cache.LookupAndStore(a, static_cast<int>(a.size() + 3) / 4);
  ASSERT_EQ(sink.events.size(), 1u);
  const SinkEvent first = sink.events[0];
  EXPECT_EQ(first.kind, "stored");
  EXPECT_EQ(first.hashes.size(), 3u) << "the partial block is not cached";
  EXPECT_FALSE(first.parent.has_value());
  // The tokens are the tokenizer's for those blocks' text: what /tokenize
  // answers for the prompt, up to its last full block.
  const std::vector<uint32_t> all = SimTokenize(a);
  EXPECT_EQ(first.tokens, std::vector<uint32_t>(all.begin(), all.begin() + 48));

  // A prompt that shares the first two blocks stores only what is new,
  // after its parent: block 1 of the chain.
  sink.events.clear();
  const std::string b = a.substr(0, 2 * kBlockChars) + Text("b", 2);
  cache.LookupAndStore(b, static_cast<int>(b.size() + 3) / 4);
  ASSERT_EQ(sink.events.size(), 1u);
  EXPECT_EQ(sink.events[0].hashes.size(), 2u);
  EXPECT_EQ(sink.events[0].parent, first.hashes[1]);
  // Stored again as a whole: nothing new, nothing told.
  sink.events.clear();
  cache.StoreBlocks(a);
  EXPECT_TRUE(sink.events.empty());
}

TEST(SimBlockEventsTest, EvictionsAreToldAsRemovals) {
  PrefixCache cache(4);
  SinkRecorder sink;
  cache.SetSink(&sink);
  const std::string a = Text("a", 3);
  cache.LookupAndStore(a, 48);
  sink.events.clear();
  cache.LookupAndStore(Text("b", 3), 48);  // 6 blocks > 4: two of a's go
  ASSERT_EQ(sink.events.size(), 3u);
  EXPECT_EQ(sink.events[0].kind, "stored");
  EXPECT_EQ(sink.events[1].kind, "removed");
  EXPECT_EQ(sink.events[2].kind, "removed");
  EXPECT_NE(sink.events[1].hashes[0], sink.events[2].hashes[0]);

  sink.events.clear();
  cache.Reset(/*announce=*/false);
  EXPECT_TRUE(sink.events.empty()) << "a restart is silent";
  cache.LookupAndStore(a, 48);
  sink.events.clear();
  cache.Reset();
  ASSERT_EQ(sink.events.size(), 1u);
  EXPECT_EQ(sink.events[0].kind, "cleared");
}

TEST(SimBlockEventsTest, IdBlocksAreToldWithExactlyTheirIds) {
  PrefixCache cache(100);
  SinkRecorder sink;
  cache.SetSink(&sink);
  std::vector<uint32_t> ids;
  for (uint32_t i = 0; i < 40; ++i) ids.push_back(151643 + i % 64);
  EXPECT_EQ(cache.LookupAndStore(ids, 40), 0);
  ASSERT_EQ(sink.events.size(), 1u);
  EXPECT_EQ(sink.events[0].hashes.size(), 2u);
  EXPECT_EQ(sink.events[0].tokens, std::vector<uint32_t>(ids.begin(), ids.begin() + 32));
  const std::vector<uint64_t> first = sink.events[0].hashes;
  // The same ids again: both blocks; one more block's worth after them:
  // only the new block is told, after its parent.
  EXPECT_EQ(cache.LookupAndStore(ids, 40), 32);
  sink.events.clear();
  std::vector<uint32_t> longer = ids;
  for (uint32_t i = 0; i < 10; ++i) longer.push_back(7 + i);
  cache.StoreBlocks(longer);
  ASSERT_EQ(sink.events.size(), 1u);
  EXPECT_EQ(sink.events[0].parent, std::optional<uint64_t>(first[1]));
  EXPECT_EQ(sink.events[0].tokens, std::vector<uint32_t>(longer.begin() + 32, longer.begin() + 48));
  EXPECT_EQ(cache.LookupAndStore(longer, 50), 48);
}

TEST(SimPrefixCacheTest, TextIsCachedByItsTokenizedIds) {
  PrefixCache cache(100);
  const std::string a = Text("a", 3) + " tail";
  cache.LookupAndStore(a, Tokens(a));
  EXPECT_EQ(cache.LookupAndStore(SimTokenize(a), Tokens(a)), 48);
  EXPECT_EQ(cache.LookupAndStore(SimTokenize(Text("b", 2)), 32), 0);
  // The ids of the text, not the text of the ids.
  EXPECT_EQ(cache.LookupAndStore(std::vector<uint32_t>(48, 1), 48), 0);
}

TEST(SimTokenizerTest, FourCharactersPerTokenAndPrefixStable) {
  EXPECT_TRUE(SimTokenize("").empty());
  EXPECT_EQ(SimTokenize("abcd").size(), 1u);
  EXPECT_EQ(SimTokenize("abcde").size(), 2u);
  const std::vector<uint32_t> whole = SimTokenize("narwhals live in the arctic");
  const std::vector<uint32_t> head = SimTokenize("narwhals live in");
  ASSERT_GE(whole.size(), head.size());
  EXPECT_TRUE(std::equal(head.begin(), head.end() - 1, whole.begin()))
      << "ids of a prefix cut at 4-character boundaries are the prompt's";
  EXPECT_NE(SimTokenize("abcd"), SimTokenize("abce"));
  for (uint32_t id : whole) EXPECT_LT(id, kSimVocabulary);
}

}  // namespace
}  // namespace narwhal::sim
