// The KV-event stream's rule book (router/fleet/kv_event_stream.h): in-order
// batches applied; a gap replayed from the first missing batch while live
// batches are held; every way a gap cannot be closed — no replay endpoint, a
// reply that starts late or ends short, a timeout on the injected clock,
// too much held — and a restart, a batch that does not decode and a lost
// connection make the engine cold (clear, then only what follows).
#include "router/fleet/kv_event_stream.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/fakes/kv_batch_writer.h"

namespace narwhal::router::kv {
namespace {

using namespace std::chrono_literals;
using testing::ClearedSpec;
using testing::EncodeBatch;
using testing::RemovedSpec;

// Batch n removes hash n: which batches a step applies, in order, reads off
// the hashes.
std::string BatchNo(uint64_t n) { return EncodeBatch({RemovedSpec{{n}}}); }

std::vector<uint64_t> Numbers(const KvStreamStep& step) {
  std::vector<uint64_t> out;
  for (const KvEventBatch& b : step.apply) {
    const auto& removed = std::get<BlockRemoved>(b.events.at(0));
    absl::StatusOr<uint64_t> n = DecodeSeq(removed.block_hashes.at(0).bytes);
    out.push_back(n.ok() ? *n : ~0ull);
  }
  return out;
}

using Frames = std::vector<std::string>;
KvStreamStep Replay(KvEventStream& s, const Frames& frames) {
  std::vector<std::string_view> v(frames.begin(), frames.end());
  return s.OnReplay(v);
}
// A reply with the topic frame (vLLM after PR #45177) or without.
Frames ReplyOf(uint64_t n, bool topic = true) {
  return topic ? Frames{"", "kv", EncodeSeq(n), BatchNo(n)} : Frames{"", EncodeSeq(n), BatchNo(n)};
}
Frames EndOfReplay() { return {"", "kv", EncodeSeq(kReplayEndSeq), ""}; }

class KvEventStreamTest : public ::testing::Test {
 protected:
  KvStreamStep Live(KvEventStream& s, uint64_t n) {
    return s.OnLive(EncodeSeq(n), BatchNo(n), now_);
  }
  engines::MonoTime now_{std::chrono::seconds(100)};
  // Gaps in a stream already under way (no rebuild of its start).
  KvEventStream replaying_{KvStreamOptions{
      .can_replay = true, .rebuild = false, .replay_timeout = 2s, .max_held = 3, .decode = {}}};
  KvEventStream plain_{KvStreamOptions{
      .can_replay = false, .rebuild = true, .replay_timeout = 2s, .max_held = 3, .decode = {}}};
  KvEventStream rebuilding_{KvStreamOptions{
      .can_replay = true, .rebuild = true, .replay_timeout = 2s, .max_held = 3, .decode = {}}};
};

TEST_F(KvEventStreamTest, InOrderBatchesAreApplied) {
  // The first batch after subscribing is applied whatever its number.
  EXPECT_EQ(Numbers(Live(plain_, 41)), std::vector<uint64_t>{41});
  KvStreamStep step = Live(plain_, 42);
  EXPECT_EQ(Numbers(step), std::vector<uint64_t>{42});
  EXPECT_FALSE(step.clear);
  EXPECT_FALSE(step.gap.has_value());
  EXPECT_EQ(plain_.last_seq(), 42u);
}

TEST_F(KvEventStreamTest, AGapWithoutReplayMakesTheEngineCold) {
  Live(plain_, 0);
  KvStreamStep step = Live(plain_, 3);
  EXPECT_TRUE(step.clear);
  EXPECT_EQ(step.gap, GapOutcome::kNoReplay);
  EXPECT_EQ(Numbers(step), std::vector<uint64_t>{3}) << "what follows the gap is applied";
  EXPECT_EQ(Numbers(Live(plain_, 4)), std::vector<uint64_t>{4});
}

TEST_F(KvEventStreamTest, AGapIsReplayedThenTheHeldBatchesFollow) {
  Live(replaying_, 10);
  KvStreamStep step = Live(replaying_, 13);
  EXPECT_EQ(step.replay_from, 11u);
  EXPECT_TRUE(step.apply.empty()) << "13 waits for 11 and 12";
  EXPECT_FALSE(step.clear);
  EXPECT_TRUE(replaying_.replaying());
  EXPECT_TRUE(Live(replaying_, 14).apply.empty());

  EXPECT_EQ(Numbers(Replay(replaying_, ReplyOf(11))), std::vector<uint64_t>{11});
  EXPECT_TRUE(Replay(replaying_, ReplyOf(11)).apply.empty()) << "a duplicate is skipped";
  EXPECT_EQ(Numbers(Replay(replaying_, ReplyOf(12, /*topic=*/false))), std::vector<uint64_t>{12});
  // The publisher's buffer runs on past the gap: what the index has, or
  // holds, is not applied twice.
  EXPECT_EQ(Numbers(Replay(replaying_, ReplyOf(13))), std::vector<uint64_t>{13});
  step = Replay(replaying_, EndOfReplay());
  EXPECT_EQ(step.gap, GapOutcome::kReplayed);
  EXPECT_FALSE(step.clear);
  EXPECT_EQ(Numbers(step), std::vector<uint64_t>{14});
  EXPECT_FALSE(replaying_.replaying());
  EXPECT_EQ(Numbers(Live(replaying_, 15)), std::vector<uint64_t>{15});
}

TEST_F(KvEventStreamTest, AReplayThatStartsLateMakesTheEngineCold) {
  Live(replaying_, 10);
  Live(replaying_, 13);
  KvStreamStep step = Replay(replaying_, ReplyOf(12));  // 11 left the engine's buffer
  EXPECT_TRUE(step.clear);
  EXPECT_EQ(step.gap, GapOutcome::kReplayFailed);
  EXPECT_EQ(Numbers(step), std::vector<uint64_t>{13}) << "the held batch, after the clear";
  EXPECT_FALSE(replaying_.replaying());
  EXPECT_TRUE(Replay(replaying_, ReplyOf(13)).apply.empty()) << "late replies are ignored";
}

TEST_F(KvEventStreamTest, AReplayThatEndsShortMakesTheEngineCold) {
  Live(replaying_, 10);
  Live(replaying_, 13);
  Replay(replaying_, ReplyOf(11));
  KvStreamStep step = Replay(replaying_, EndOfReplay());
  EXPECT_TRUE(step.clear);
  EXPECT_EQ(step.gap, GapOutcome::kReplayFailed);
  EXPECT_EQ(Numbers(step), std::vector<uint64_t>{13});
}

TEST_F(KvEventStreamTest, AReplayTimesOutOnTheClock) {
  Live(replaying_, 10);
  Live(replaying_, 12);
  EXPECT_EQ(replaying_.replay_deadline(), now_ + 2s);
  EXPECT_FALSE(replaying_.OnTick(now_ + 2s - 1ms).gap.has_value());
  KvStreamStep step = replaying_.OnTick(now_ + 2s);
  EXPECT_TRUE(step.clear);
  EXPECT_EQ(step.gap, GapOutcome::kReplayTimeout);
  EXPECT_EQ(Numbers(step), std::vector<uint64_t>{12});
  EXPECT_FALSE(replaying_.replay_deadline().has_value());
}

TEST_F(KvEventStreamTest, TooManyHeldBatchesMakeTheEngineCold) {
  Live(replaying_, 10);
  Live(replaying_, 12);  // held: 12
  Live(replaying_, 13);
  Live(replaying_, 14);  // held: 12, 13, 14 (max_held 3)
  KvStreamStep step = Live(replaying_, 15);
  EXPECT_TRUE(step.clear);
  EXPECT_EQ(step.gap, GapOutcome::kReplayOverrun);
  EXPECT_EQ(Numbers(step), (std::vector<uint64_t>{12, 13, 14, 15}));
  EXPECT_FALSE(replaying_.replaying());
}

TEST_F(KvEventStreamTest, ANewGapAmongTheHeldBatchesMakesTheEngineCold) {
  Live(replaying_, 10);
  Live(replaying_, 12);
  Live(replaying_, 14);  // 13 lost too
  Replay(replaying_, ReplyOf(11));
  KvStreamStep step = Replay(replaying_, EndOfReplay());
  EXPECT_TRUE(step.clear);
  EXPECT_EQ(step.gap, GapOutcome::kReplayFailed);
  EXPECT_EQ(Numbers(step), std::vector<uint64_t>{14});
}

TEST_F(KvEventStreamTest, ASequenceThatGoesBackIsARestart) {
  Live(replaying_, 500);
  KvStreamStep step = Live(replaying_, 0);
  EXPECT_TRUE(step.clear);
  EXPECT_EQ(step.gap, GapOutcome::kReset);
  EXPECT_FALSE(step.replay_from.has_value()) << "nothing of the old engine is worth replaying";
  EXPECT_EQ(Numbers(step), std::vector<uint64_t>{0});
  EXPECT_EQ(Numbers(Live(replaying_, 1)), std::vector<uint64_t>{1});
}

TEST_F(KvEventStreamTest, ABatchThatDoesNotDecodeMakesTheEngineCold) {
  Live(plain_, 0);
  KvStreamStep step = plain_.OnLive(EncodeSeq(1), "\xc1 not msgpack", now_);
  EXPECT_TRUE(step.clear);
  EXPECT_EQ(step.gap, GapOutcome::kBadBatch);
  EXPECT_TRUE(step.apply.empty());
  EXPECT_EQ(Numbers(Live(plain_, 2)), std::vector<uint64_t>{2}) << "numbering goes on";
  step = plain_.OnLive("short", BatchNo(3), now_);
  EXPECT_EQ(step.gap, GapOutcome::kBadBatch);
}

TEST_F(KvEventStreamTest, ALostConnectionMakesTheEngineColdAndStartsAfresh) {
  Live(replaying_, 7);
  Live(replaying_, 9);  // replaying, 9 held
  KvStreamStep step = replaying_.OnLost("connection lost");
  EXPECT_TRUE(step.clear);
  EXPECT_EQ(step.gap, GapOutcome::kLost);
  EXPECT_TRUE(step.apply.empty()) << "held batches precede what was lost";
  EXPECT_FALSE(replaying_.replaying());
  // The next batch, whatever its number, starts the stream again.
  step = Live(replaying_, 3);
  EXPECT_FALSE(step.clear);
  EXPECT_EQ(Numbers(step), std::vector<uint64_t>{3});
}

TEST_F(KvEventStreamTest, AReplyThatDoesNotDecodeMakesTheEngineCold) {
  Live(replaying_, 1);
  Live(replaying_, 3);
  KvStreamStep step = Replay(replaying_, {"", "x"});
  EXPECT_EQ(step.gap, GapOutcome::kReplayFailed);
  EXPECT_TRUE(step.clear);
}

TEST_F(KvEventStreamTest, AStreamThatStartsPastZeroIsRebuiltFromTheEnginesBuffer) {
  // The first batch seen is 7: the engine's buffer is asked from batch 0,
  // live batches are held, and nothing counts as a gap.
  KvStreamStep step = Live(rebuilding_, 7);
  EXPECT_TRUE(step.apply.empty());
  EXPECT_EQ(step.replay_from, 0u);
  EXPECT_FALSE(step.gap.has_value());
  EXPECT_TRUE(rebuilding_.replaying());
  EXPECT_TRUE(Live(rebuilding_, 8).apply.empty());
  std::vector<uint64_t> applied;
  for (uint64_t n = 0; n <= 8; ++n) {  // the buffer reaches past what is held
    for (uint64_t a : Numbers(Replay(rebuilding_, ReplyOf(n)))) applied.push_back(a);
  }
  step = Replay(rebuilding_, EndOfReplay());
  for (uint64_t a : Numbers(step)) applied.push_back(a);
  EXPECT_EQ(applied, (std::vector<uint64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8}));  // each once, in order
  EXPECT_FALSE(step.clear);
  EXPECT_FALSE(step.gap.has_value());
  EXPECT_FALSE(rebuilding_.replaying());
  EXPECT_EQ(Numbers(Live(rebuilding_, 9)), std::vector<uint64_t>{9});
}

TEST_F(KvEventStreamTest, ARebuildTakesTheBuffersSuffixWhenItNoLongerReachesZero) {
  Live(rebuilding_, 20);
  // The engine's buffer starts at 15: applying 15.. in order never claims a
  // block the engine does not hold.
  KvStreamStep step = Replay(rebuilding_, ReplyOf(15));
  EXPECT_FALSE(step.clear);
  EXPECT_EQ(Numbers(step), std::vector<uint64_t>{15});
  // But a hole after its start is a gap like any other: cold.
  step = Replay(rebuilding_, ReplyOf(17));
  EXPECT_TRUE(step.clear);
  EXPECT_EQ(step.gap, GapOutcome::kReplayFailed);
  EXPECT_EQ(Numbers(step), std::vector<uint64_t>{20});  // the held batch, after the clear
}

TEST_F(KvEventStreamTest, ARebuildThatEndsShortOrTimesOutLeavesOnlyTheLiveBatches) {
  Live(rebuilding_, 5);
  Replay(rebuilding_, ReplyOf(0));
  Replay(rebuilding_, ReplyOf(1));
  KvStreamStep step = Replay(rebuilding_, EndOfReplay());  // 2..4 missing
  EXPECT_TRUE(step.clear);
  EXPECT_EQ(step.gap, GapOutcome::kReplayFailed);
  EXPECT_EQ(Numbers(step), std::vector<uint64_t>{5});

  KvEventStream timing_out{KvStreamOptions{
      .can_replay = true, .rebuild = true, .replay_timeout = 2s, .max_held = 3, .decode = {}}};
  Live(timing_out, 3);
  EXPECT_TRUE(timing_out.OnTick(now_ + 1s).apply.empty());
  step = timing_out.OnTick(now_ + 2s);
  EXPECT_TRUE(step.clear);
  EXPECT_EQ(step.gap, GapOutcome::kReplayTimeout);
  EXPECT_EQ(Numbers(step), std::vector<uint64_t>{3});
}

TEST_F(KvEventStreamTest, ARestartedEngineIsRebuiltFromItsFirstBatch) {
  Live(rebuilding_, 0);
  Live(rebuilding_, 1);
  Live(rebuilding_, 2);
  // The engine restarted: its batch 0 was missed, its batch 1 arrives.
  KvStreamStep step = Live(rebuilding_, 1);  // back to 1
  EXPECT_TRUE(step.clear);
  EXPECT_EQ(step.gap, GapOutcome::kReset);
  EXPECT_EQ(step.replay_from, 0u);
  EXPECT_TRUE(step.apply.empty());
  std::vector<uint64_t> applied = Numbers(Replay(rebuilding_, ReplyOf(0)));
  for (uint64_t a : Numbers(Replay(rebuilding_, ReplyOf(1)))) applied.push_back(a);
  for (uint64_t a : Numbers(Replay(rebuilding_, EndOfReplay()))) applied.push_back(a);
  EXPECT_EQ(applied, (std::vector<uint64_t>{0, 1}));
  // After a lost connection, too.
  step = rebuilding_.OnLost("disconnected");
  EXPECT_TRUE(step.clear);
  step = Live(rebuilding_, 6);
  EXPECT_EQ(step.replay_from, 0u);
}

}  // namespace
}  // namespace narwhal::router::kv
