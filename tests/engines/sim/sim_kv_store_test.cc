#include "engines/sim/kv_store.h"

#include <set>

#include "gtest/gtest.h"

namespace narwhal::sim {
namespace {

class SimKvStoreTest : public ::testing::Test {
 protected:
  double now_ = 1000.0;
  KvStore store_{30.0, [this] { return now_; }};
};

TEST_F(SimKvStoreTest, HoldsOneBlockPerSixteenTokens) {
  EXPECT_EQ(store_.Hold("a", 1).block_ids.size(), 1u);
  EXPECT_EQ(store_.Hold("b", 16).block_ids.size(), 1u);
  EXPECT_EQ(store_.Hold("c", 17).block_ids.size(), 2u);
  EXPECT_EQ(store_.Hold("d", 0).block_ids.size(), 1u);
  EXPECT_EQ(store_.held_count(), 4u);
}

TEST_F(SimKvStoreTest, BlockIdsAreDistinctAcrossEntries) {
  std::set<int> ids;
  size_t total = 0;
  for (int i = 0; i < 20; ++i) {
    for (int id : store_.Hold("r" + std::to_string(i), 40).block_ids) {
      ids.insert(id);
      EXPECT_GE(id, 0);
      ++total;
    }
  }
  EXPECT_EQ(ids.size(), total);
}

TEST_F(SimKvStoreTest, PullConsumesOnce) {
  const KvEntry held = store_.Hold("cmpl-x-1234abcd", 20);
  EXPECT_DOUBLE_EQ(held.expires_at, 1030.0);
  now_ += 5;
  PullResult first = store_.Pull("cmpl-x-1234abcd", {"d0", "cmpl-y", "1.2.3.4:5"});
  EXPECT_EQ(first.outcome, PullOutcome::kOk);
  EXPECT_EQ(first.entry.block_ids, held.block_ids);
  EXPECT_EQ(first.entry.num_tokens, 20);
  EXPECT_EQ(store_.held_count(), 0u);
  EXPECT_EQ(store_.Pull("cmpl-x-1234abcd", {}).outcome, PullOutcome::kConsumed);

  const nlohmann::json json = store_.ToJson();
  EXPECT_TRUE(json["held"].empty());
  ASSERT_EQ(json["consumed"].size(), 1u);
  EXPECT_EQ(json["consumed"][0]["remote_request_id"], "cmpl-x-1234abcd");
  EXPECT_EQ(json["consumed"][0]["state"], "consumed");
  EXPECT_EQ(json["consumed"][0]["consumer"]["engine_id"], "d0");
  EXPECT_EQ(json["consumed"][0]["consumer"]["request_id"], "cmpl-y");
  EXPECT_DOUBLE_EQ(json["consumed"][0]["consumed_at"].get<double>(), 1005.0);
  EXPECT_EQ(store_.expired_total(), 0u);
}

TEST_F(SimKvStoreTest, ReleaseFreesWithoutATransferOnce) {
  store_.Hold("cmpl-r-1234abcd", 20);
  store_.Hold("cmpl-k-1234abcd", 20);
  now_ += 2;
  PullResult released = store_.Release("cmpl-r-1234abcd", {"d0", "cmpl-z", "1.2.3.4:5"});
  EXPECT_EQ(released.outcome, PullOutcome::kOk);
  EXPECT_EQ(store_.held_count(), 1u);  // only the named handoff
  EXPECT_EQ(store_.Release("cmpl-r-1234abcd", {}).outcome, PullOutcome::kReleased);
  EXPECT_EQ(store_.Pull("cmpl-r-1234abcd", {}).outcome, PullOutcome::kReleased);
  EXPECT_EQ(store_.Release("nope", {}).outcome, PullOutcome::kUnknown);

  const nlohmann::json json = store_.ToJson();
  ASSERT_EQ(json["released"].size(), 1u);
  EXPECT_EQ(json["released"][0]["state"], "released");
  EXPECT_EQ(json["released"][0]["consumer"]["engine_id"], "d0");
  EXPECT_DOUBLE_EQ(json["released"][0]["released_at"].get<double>(), 1002.0);
  EXPECT_TRUE(json["consumed"].empty());
  // A released handoff never expires later.
  now_ += 60;
  EXPECT_EQ(store_.expired_total(), 1u);  // the other one
  EXPECT_EQ(store_.ToJson()["released"].size(), 1u);
}

TEST_F(SimKvStoreTest, UnknownIdsAreUnknown) {
  EXPECT_EQ(store_.Pull("nope", {}).outcome, PullOutcome::kUnknown);
}

TEST_F(SimKvStoreTest, LeaseExpiry) {
  store_.Hold("a", 10);
  now_ += 10;
  store_.Hold("b", 10);
  now_ += 19.5;  // a: 29.5 s old, b: 19.5 s
  EXPECT_EQ(store_.held_count(), 2u);
  now_ += 1;  // a: 30.5 s
  EXPECT_EQ(store_.held_count(), 1u);
  EXPECT_EQ(store_.expired_total(), 1u);
  EXPECT_EQ(store_.Pull("a", {}).outcome, PullOutcome::kExpired);
  EXPECT_EQ(store_.Pull("b", {}).outcome, PullOutcome::kOk);

  const nlohmann::json json = store_.ToJson();
  ASSERT_EQ(json["expired"].size(), 1u);
  EXPECT_EQ(json["expired"][0]["remote_request_id"], "a");
  EXPECT_EQ(json["expired"][0]["state"], "expired");
  EXPECT_DOUBLE_EQ(json["expired"][0]["expired_at"].get<double>(), 1030.5);
}

TEST_F(SimKvStoreTest, ConsumedEntriesNeverExpire) {
  store_.Hold("a", 10);
  ASSERT_EQ(store_.Pull("a", {}).outcome, PullOutcome::kOk);
  now_ += 100;
  EXPECT_EQ(store_.expired_total(), 0u);
  EXPECT_EQ(store_.Pull("a", {}).outcome, PullOutcome::kConsumed);
}

TEST_F(SimKvStoreTest, HeldListShowsLiveEntriesOldestFirst) {
  store_.Hold("first", 10);
  now_ += 1;
  store_.Hold("second", 10);
  const nlohmann::json held = store_.ToJson()["held"];
  ASSERT_EQ(held.size(), 2u);
  EXPECT_EQ(held[0]["remote_request_id"], "first");
  EXPECT_EQ(held[1]["remote_request_id"], "second");
  EXPECT_EQ(held[0]["state"], "held");
  EXPECT_TRUE(held[0]["remote_block_ids"].is_array());
  EXPECT_TRUE(held[0]["remote_block_ids"][0].is_array());
}

TEST_F(SimKvStoreTest, HistoryIsBounded) {
  for (size_t i = 0; i < KvStore::kHistory + 10; ++i) {
    const std::string id = "r" + std::to_string(i);
    store_.Hold(id, 1);
    store_.Pull(id, {});
  }
  EXPECT_EQ(store_.ToJson()["consumed"].size(), KvStore::kHistory);
  EXPECT_EQ(store_.Pull("r0", {}).outcome, PullOutcome::kUnknown);
  EXPECT_EQ(store_.Pull("r1009", {}).outcome, PullOutcome::kConsumed);
}

}  // namespace
}  // namespace narwhal::sim
