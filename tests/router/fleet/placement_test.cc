// Placement: the prefix index (router/prefix_index), the cache-aware choice
// (router/placement) and the Fleet's use of both — affinity, the imbalance
// fallback, breaker state before affinity, index loss on ejection, and
// decode legs reserved while their prefill runs. Fake clock, no sockets.
#include "router/fleet/placement.h"

#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "router/fleet/fleet.h"
#include "router/fleet/prefix_index.h"
#include "tests/fakes/fake_clock.h"
#include "tests/fakes/test_engine.h"
#include "tests/router/test_util.h"

namespace narwhal::router {
namespace {

namespace nt = ::narwhal::testing;
using engines::Api;
using engines::Phase;

using ::narwhal::testing::Engine;

// A prompt of `chunks` whole index chunks, distinct per `tag`.
std::string Prompt(const std::string& tag, size_t chunks) {
  std::string text;
  while (text.size() < chunks * PrefixIndex::kChunkBytes) text += tag + " shared system prompt. ";
  text.resize(chunks * PrefixIndex::kChunkBytes);
  return text;
}

// ---------------------------------------------------------------------------
// PrefixIndex

TEST(PrefixIndexTest, MatchesTheLongestIndexedPrefixInWholeChunks) {
  PrefixIndex index(1000);
  const std::string system = Prompt("a", 10);
  index.Insert(PrefixIndex::Key(system + "question one, about narwhals and their tusks"));
  EXPECT_EQ(index.size(), 10u);  // the partial tail chunk is not indexed
  // Same system prompt, another question: the 10 system chunks match.
  EXPECT_EQ(index.Match(PrefixIndex::Key(system + "a different question entirely, not the same")),
            10u);
  // A prompt that differs in its first chunk matches nothing, even if later
  // chunks are equal (chain hashes).
  std::string changed = system;
  changed[0] = 'X';
  EXPECT_EQ(index.Match(PrefixIndex::Key(changed)), 0u);
  // Diverging in chunk 4: 4 chunks match.
  std::string diverged = system;
  diverged[4 * PrefixIndex::kChunkBytes + 3] = '#';
  EXPECT_EQ(index.Match(PrefixIndex::Key(diverged)), 4u);
  EXPECT_EQ(index.Match(PrefixIndex::Key("short")), 0u);
  EXPECT_EQ(PrefixIndex::Key("short").chunks.size(), 0u);
  EXPECT_EQ(PrefixIndex::Key(system).text_bytes, system.size());
}

TEST(PrefixIndexTest, BoundedWithLeastRecentlyUsedEviction) {
  PrefixIndex index(8);
  const PromptKey a = PrefixIndex::Key(Prompt("a", 4));
  const PromptKey b = PrefixIndex::Key(Prompt("b", 4));
  const PromptKey c = PrefixIndex::Key(Prompt("c", 4));
  index.Insert(a);
  index.Insert(b);
  EXPECT_EQ(index.size(), 8u);
  index.Insert(a);  // a is now the most recent
  index.Insert(c);  // evicts b, the least recently used
  EXPECT_EQ(index.size(), 8u);
  EXPECT_EQ(index.Match(a), 4u);
  EXPECT_EQ(index.Match(b), 0u);
  EXPECT_EQ(index.Match(c), 4u);
  // A prompt longer than the index keeps its head (its tail is evicted first).
  const PromptKey long_key = PrefixIndex::Key(Prompt("d", 12));
  index.Insert(long_key);
  EXPECT_EQ(index.size(), 8u);
  EXPECT_EQ(index.Match(long_key), 8u);
  index.Clear();
  EXPECT_EQ(index.size(), 0u);
  EXPECT_EQ(index.Match(long_key), 0u);

  PrefixIndex off(0);
  off.Insert(a);
  EXPECT_EQ(off.size(), 0u);
}

TEST(PrefixIndexTest, PromptTextOfCompletionsAndChat) {
  EXPECT_EQ(PromptText(Api::kCompletions, {{"prompt", "hello"}}), "hello");
  EXPECT_EQ(PromptText(Api::kCompletions, {{"prompt", {"hello"}}}), "hello");
  EXPECT_EQ(PromptText(Api::kCompletions, {{"prompt", {1, 2, 3}}}), "[1,2,3]");
  EXPECT_EQ(PromptText(Api::kCompletions, {{"model", "m"}}), "");
  const nlohmann::json chat = {
      {"messages",
       {{{"role", "system"}, {"content", "be brief"}},
        {{"role", "user"}, {"content", {{{"type", "text"}, {"text", "hi"}}}}}}}};
  const std::string text = PromptText(Api::kChatCompletions, chat);
  EXPECT_NE(text.find("system"), std::string::npos);
  EXPECT_NE(text.find("be brief"), std::string::npos);
  EXPECT_NE(text.find("hi"), std::string::npos);
  // Message boundaries count: the same words split differently differ.
  const nlohmann::json other = {
      {"messages",
       {{{"role", "system"}, {"content", "be"}}, {{"role", "user"}, {"content", " briefhi"}}}}};
  EXPECT_NE(PromptText(Api::kChatCompletions, other), text);
  // A chat that grows by a turn keeps the earlier turns as its prefix.
  nlohmann::json longer = chat;
  longer["messages"].push_back({{"role", "assistant"}, {"content", "ok"}});
  EXPECT_EQ(PromptText(Api::kChatCompletions, longer).rfind(text, 0), 0u);
  EXPECT_EQ(PromptText(Api::kChatCompletions, {{"messages", "x"}}), "");
}

// ---------------------------------------------------------------------------
// ChooseCacheAware

TEST(ChooseCacheAwareTest, AnAvoidedEngineCountsOnlyWhenNoOtherIs) {
  // B28's prefill avoids the decode engine chosen first: even holding the
  // longest run (and idle), it loses to any other producer.
  std::vector<Candidate> c = {{0, 0, true, 9, 0}, {1, 4, false, 2, 0}, {2, 5, false, 0, 0}};
  std::optional<Choice> choice = ChooseCacheAware(c, 0, ImbalanceLimit{100, 100});
  ASSERT_TRUE(choice);
  EXPECT_EQ(choice->pos, 1u);
  EXPECT_EQ(choice->reason, PlacementReason::kPrefixMatch);
  c = {{0, 0, true, 9, 0}, {1, 4, false, 0, 0}};
  choice = ChooseCacheAware(c, 0, ImbalanceLimit{100, 100});
  ASSERT_TRUE(choice);
  EXPECT_EQ(choice->pos, 1u);
  EXPECT_EQ(choice->reason, PlacementReason::kLeastLoaded);
  // The only candidate: taken.
  c = {{0, 3, true, 9, 0}};
  choice = ChooseCacheAware(c, 0, ImbalanceLimit{100, 100});
  ASSERT_TRUE(choice);
  EXPECT_EQ(choice->pos, 0u);
}

TEST(ChooseCacheAwareTest, LongestMatchThenImbalanceThenLeastLoaded) {
  const ImbalanceLimit limit{2, 1.5};
  // No match: least loaded; ties go to the smaller index.
  std::vector<Candidate> c = {{0, 1, false, 0, 50}, {1, 1, false, 0, 10}, {2, 3, false, 0, 0}};
  std::optional<Choice> choice = ChooseCacheAware(c, 0, limit);
  ASSERT_TRUE(choice);
  EXPECT_EQ(choice->pos, 1u);
  EXPECT_EQ(choice->reason, PlacementReason::kLeastLoaded);
  // The longest match wins over load within the limit.
  c = {{0, 0, false, 2, 50}, {1, 2, false, 7, 50}, {2, 1, false, 7, 50}};
  choice = ChooseCacheAware(c, 0, limit);
  ASSERT_TRUE(choice);
  EXPECT_EQ(choice->pos, 2u);  // equal matches: fewer in flight
  EXPECT_EQ(choice->reason, PlacementReason::kPrefixMatch);
  // Beyond the absolute and relative limits: least loaded.
  c = {{0, 0, false, 0, 50}, {1, 3, false, 7, 50}};
  choice = ChooseCacheAware(c, 0, limit);
  ASSERT_TRUE(choice);
  EXPECT_EQ(choice->pos, 0u);
  EXPECT_EQ(choice->reason, PlacementReason::kImbalance);
  // Beyond the absolute limit only (6 - 3 > 2, but 6 <= 2.5 * 3): kept.
  c = {{0, 3, false, 0, 50}, {1, 6, false, 7, 50}};
  choice = ChooseCacheAware(c, 0, ImbalanceLimit{2, 2.5});
  ASSERT_TRUE(choice);
  EXPECT_EQ(choice->pos, 1u);
  EXPECT_EQ(choice->reason, PlacementReason::kPrefixMatch);
  EXPECT_FALSE(ChooseCacheAware({}, 0, limit));
  EXPECT_TRUE(Imbalanced(9, 0, ImbalanceLimit{8, 1.5}));
  EXPECT_FALSE(Imbalanced(8, 0, ImbalanceLimit{8, 1.5}));
  EXPECT_FALSE(Imbalanced(20, 10, ImbalanceLimit{8, 2.0}));
  EXPECT_TRUE(Imbalanced(21, 10, ImbalanceLimit{8, 2.0}));
}

// ---------------------------------------------------------------------------
// Fleet

class FleetPlacementTest : public ::testing::Test {
 protected:
  FleetPlacementTest() : metrics_(registry_) {
    settings_.model = "m";
    settings_.engines = {Engine("p0", Role::kPrefill), Engine("p1", Role::kPrefill),
                         Engine("d0", Role::kDecode), Engine("d1", Role::kDecode)};
  }

  // Places one prefill of `text` and returns where it went (released at once
  // unless `keep` is given).
  std::string Place(Fleet& fleet, const std::string& text, PlacementInfo* info = nullptr,
                    std::vector<Fleet::Reservation>* keep = nullptr,
                    const std::vector<std::string>& excluded = {}) {
    const PromptKey key = PrefixIndex::Key(text);
    std::optional<Fleet::Reservation> r =
        fleet.PickAndReserve(Phase::kPrefill, excluded, "", PlacementPrompt{&key, {}, 16}, info);
    if (!r) return "";
    const std::string iid = r->target().iid;
    if (keep != nullptr) keep->push_back(std::move(*r));
    return iid;
  }
  double Decisions(const std::string& phase, const std::string& reason) {
    return nt::MetricValue(registry_, "narwhal_placement_decisions_total",
                           {{"phase", phase}, {"reason", reason}});
  }
  size_t IndexChunks(Fleet& fleet, const std::string& iid) {
    for (const EngineSnapshot& s : fleet.admin().Snapshot()) {
      if (s.settings.iid == iid) return s.prefix_index_chunks;
    }
    return 0;
  }

  Settings settings_;
  nt::FakeClock clock_;
  prometheus::Registry registry_;
  Metrics metrics_;
};

TEST_F(FleetPlacementTest, EverySeriesExistsAtZeroFromTheStart) {
  Fleet fleet(settings_, clock_, &metrics_);
  for (const char* phase : {"prefill", "decode"}) {
    for (const char* reason :
         {"least_loaded", "prefix_match", "imbalance", "same_worker", "local_prefill"}) {
      EXPECT_EQ(Decisions(phase, reason), 0) << phase << " " << reason;
    }
  }
  EXPECT_EQ(nt::MetricValue(registry_, "narwhal_placement_prefix_match_ratio"), 0);
}

TEST_F(FleetPlacementTest, AffinityFollowsTheLongestPrefix) {
  Fleet fleet(settings_, clock_, &metrics_);
  const std::string a = Prompt("alpha", 20);
  const std::string b = Prompt("beta", 20);
  PlacementInfo info;
  const std::string home_a = Place(fleet, a + " question 0", &info);
  EXPECT_EQ(info.reason, PlacementReason::kLeastLoaded);
  EXPECT_EQ(info.match_bytes, 0u);
  // b goes to the other producer: equal load, smaller index.
  const std::string home_b = Place(fleet, b + " question 0", &info);
  EXPECT_NE(home_b, home_a);
  EXPECT_EQ(info.reason, PlacementReason::kLeastLoaded);
  for (int i = 1; i <= 6; ++i) {
    const std::string q = " question " + std::to_string(i);
    EXPECT_EQ(Place(fleet, a + q, &info), home_a);
    EXPECT_EQ(info.reason, PlacementReason::kPrefixMatch);
    EXPECT_EQ(info.match_bytes, 20 * PrefixIndex::kChunkBytes);
    EXPECT_EQ(info.prompt_bytes, a.size() + q.size());
    EXPECT_EQ(Place(fleet, b + q, &info), home_b);
    EXPECT_EQ(info.reason, PlacementReason::kPrefixMatch);
  }
  EXPECT_EQ(Decisions("prefill", "prefix_match"), 12);
  EXPECT_EQ(Decisions("prefill", "least_loaded"), 2);
  EXPECT_EQ(nt::MetricValue(registry_, "narwhal_placement_prefix_match_ratio"), 14);
  EXPECT_GT(IndexChunks(fleet, home_a), 0u);
}

TEST_F(FleetPlacementTest, LeastLoadedPolicyIgnoresPrefixes) {
  settings_.placement.prefill = "least_loaded";
  Fleet fleet(settings_, clock_, &metrics_);
  const std::string a = Prompt("alpha", 20);
  std::map<std::string, int> homes;
  for (int i = 0; i < 6; ++i) ++homes[Place(fleet, a)];
  EXPECT_EQ(homes["p0"], 3);  // rotation spreads equal engines
  EXPECT_EQ(homes["p1"], 3);
  EXPECT_EQ(Decisions("prefill", "prefix_match"), 0);
  EXPECT_EQ(IndexChunks(fleet, "p0"), 0u);
}

TEST_F(FleetPlacementTest, ImbalanceFallsBackToLeastLoaded) {
  settings_.placement.imbalance_abs = 8;
  settings_.placement.imbalance_rel = 1.5;
  Fleet fleet(settings_, clock_, &metrics_);
  const std::string hot = Prompt("hot", 20);
  std::vector<Fleet::Reservation> running;  // legs still in flight
  PlacementInfo info;
  const std::string home = Place(fleet, hot, &info, &running);
  // 8 more legs of the hot prefix stay on its engine (load 1..8 vs 0 is within
  // the absolute limit of 8)...
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(Place(fleet, hot, &info, &running), home) << i;
    EXPECT_EQ(info.reason, PlacementReason::kPrefixMatch);
  }
  // ...the next one would make it 9 beyond the idle engine: least loaded.
  const std::string other = Place(fleet, hot, &info, &running);
  EXPECT_NE(other, home);
  EXPECT_EQ(info.reason, PlacementReason::kImbalance);
  EXPECT_EQ(Decisions("prefill", "imbalance"), 1);
  // Once the hot engine's legs finish, affinity returns (the longest match,
  // fewest in flight: both engines now hold it).
  running.clear();
  EXPECT_FALSE(Place(fleet, hot, &info).empty());
  EXPECT_EQ(info.reason, PlacementReason::kPrefixMatch);
}

TEST_F(FleetPlacementTest, RelativeImbalanceNeedsBothLimits) {
  settings_.placement.imbalance_abs = 0;
  settings_.placement.imbalance_rel = 2;
  Fleet fleet(settings_, clock_, &metrics_);
  const std::string hot = Prompt("hot", 20);
  std::vector<Fleet::Reservation> running;
  PlacementInfo info;
  const std::string home = Place(fleet, hot, &info, &running);
  const std::string other = home == "p0" ? "p1" : "p0";
  // Two unrelated legs on the other engine.
  Place(fleet, Prompt("x", 20), &info, &running, {home});
  Place(fleet, Prompt("y", 20), &info, &running, {home});
  // home: 1..4 legs vs 2 — at most twice as many: affinity.
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(Place(fleet, hot, &info, &running), home) << i;
    EXPECT_EQ(info.reason, PlacementReason::kPrefixMatch);
  }
  // 5 would be more than twice 2.
  EXPECT_EQ(Place(fleet, hot, &info, &running), other);
  EXPECT_EQ(info.reason, PlacementReason::kImbalance);
}

TEST_F(FleetPlacementTest, BreakerStateAlwaysWinsOverAffinity) {
  settings_.recovery.failure_quarantine_s = 5;
  settings_.recovery.eject_after = 1;
  Fleet fleet(settings_, clock_, &metrics_);
  const std::string a = Prompt("alpha", 20);
  PlacementInfo info;
  const std::string home = Place(fleet, a);
  const std::string other = home == "p0" ? "p1" : "p0";

  // Quarantined (B15): never placed, whatever it holds.
  engines::EngineFailure f;
  f.phase = Phase::kPrefill;
  f.iid = f.evidence_iid = home;
  f.breaker_class = BreakerClass::kStream;  // an inference hold at eject_after 1
  fleet.control().RecordFailure(f, "");
  ASSERT_NE(fleet.admin().Snapshot()[home == "p0" ? 0 : 1].state, PlacementState::kServing);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(Place(fleet, a, &info), other);
    EXPECT_NE(info.reason, PlacementReason::kImbalance);
  }
  // Drained: the same.
  ASSERT_TRUE(fleet.admin().Readmit(home, "operator").ok());
  ASSERT_TRUE(fleet.admin().Drain(home).ok());
  EXPECT_EQ(Place(fleet, a, &info), other);
  // Excluded by the request (an engine that failed it): the same.
  ASSERT_TRUE(fleet.admin().Readmit(home, "operator").ok());
  EXPECT_EQ(Place(fleet, a, &info, nullptr, {home}), other);
  EXPECT_EQ(Place(fleet, a, &info, nullptr, {home, other}), "");
}

TEST_F(FleetPlacementTest, AnEjectedEngineLosesItsIndex) {
  Fleet fleet(settings_, clock_, &metrics_);
  const std::string a = Prompt("alpha", 20);
  const std::string home = Place(fleet, a);
  Place(fleet, Prompt("beta", 20));  // the other engine
  EXPECT_EQ(IndexChunks(fleet, home), 20u);
  ASSERT_TRUE(fleet.admin().Eject(home, "restarted").ok());
  EXPECT_EQ(IndexChunks(fleet, home), 0u);
  ASSERT_TRUE(fleet.admin().Readmit(home, "operator").ok());
  // Its cache is gone: the prompt no longer matches it. The other engine
  // matches nothing for it either, so least loaded (smaller index) places it.
  PlacementInfo info;
  EXPECT_EQ(Place(fleet, a, &info), home);
  EXPECT_EQ(info.reason, PlacementReason::kLeastLoaded);
  EXPECT_EQ(info.match_bytes, 0u);
}

TEST_F(FleetPlacementTest, DecodeCountsLegsReservedWhilePrefillsRun) {
  Fleet fleet(settings_, clock_, &metrics_);
  // A burst of four prefills, each with its consumer reserved before any
  // decode starts: they spread over the two consumers.
  std::vector<Fleet::Reservation> planned;
  std::map<std::string, int> per_consumer;
  for (int i = 0; i < 4; ++i) {
    std::optional<Fleet::Reservation> r = fleet.ReserveDecode({}, "");
    ASSERT_TRUE(r);
    ++per_consumer[r->target().iid];
    planned.push_back(std::move(*r));
  }
  EXPECT_EQ(per_consumer["d0"], 2);
  EXPECT_EQ(per_consumer["d1"], 2);
  for (const EngineSnapshot& s : fleet.admin().Snapshot()) {
    if (s.settings.iid[0] != 'd') continue;
    EXPECT_EQ(s.reserved_decode, 2);
    EXPECT_EQ(s.inflight_decode, 0);  // reserved, not running
  }
  // A direct decode placement counts reserved legs as load: with d0 holding
  // one more reservation, it goes to d1.
  std::optional<Fleet::Reservation> extra = fleet.ReserveDecode({"d1"}, "");
  ASSERT_TRUE(extra);
  std::optional<Fleet::Reservation> direct = fleet.PickAndReserve(Phase::kDecode, {});
  ASSERT_TRUE(direct);
  EXPECT_EQ(direct->target().iid, "d1");
  // Activation turns a reservation into a running leg.
  ASSERT_TRUE(fleet.Activate(planned[0], {}));
  const std::string active = planned[0].target().iid;
  fleet.admin().PublishAll();  // as before a scrape
  EXPECT_EQ(
      nt::MetricValue(registry_, "narwhal_engine_inflight", {{"iid", active}, {"phase", "decode"}}),
      active == "d1" ? 2 : 1);
  // A reservation whose consumer left placement is released, not activated.
  ASSERT_TRUE(fleet.admin().Drain("d0").ok());
  Fleet::Reservation* on_d0 = nullptr;
  for (auto& r : planned) {
    if (r && r.target().iid == "d0" && &r != &planned[0]) on_d0 = &r;
  }
  ASSERT_NE(on_d0, nullptr);
  EXPECT_FALSE(fleet.Activate(*on_d0, {}));
  EXPECT_FALSE(static_cast<bool>(*on_d0));
  // Releasing everything returns every count to zero.
  planned.clear();
  extra.reset();
  direct.reset();
  for (const EngineSnapshot& s : fleet.admin().Snapshot()) {
    EXPECT_EQ(s.reserved_decode, 0) << s.settings.iid;
    EXPECT_EQ(s.inflight_decode, 0) << s.settings.iid;
  }
  EXPECT_EQ(Decisions("decode", "least_loaded"), 2);  // one activation, one direct pick
}

TEST_F(FleetPlacementTest, DecodeOnItsProducerIsCountedAsSameWorker) {
  settings_.engines = {Engine("b0", Role::kBoth), Engine("p0", Role::kPrefill)};
  Fleet fleet(settings_, clock_, &metrics_);
  std::optional<Fleet::Reservation> r = fleet.PickAndReserve(Phase::kDecode, {}, "b0");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->reason(), PlacementReason::kSameWorker);
  EXPECT_EQ(Decisions("decode", "same_worker"), 1);
}

}  // namespace
}  // namespace narwhal::router
