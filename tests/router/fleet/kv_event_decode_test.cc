// The KV-event decoder (router/fleet/kv_event_decode.h) on payloads written
// the way vLLM's msgspec writes them: events as arrays (<= 0.23) and as maps
// (>= 0.24, any key order), 2- and 3-element and map envelopes, hashes as
// small, 64-bit, negative integers and bytes, unknown fields and event
// types; then every way a payload can be broken (truncations at every byte,
// wrong types, declared lengths beyond the data, nesting 100k deep, trailing
// bytes), and the sequence and replay frames of both reply layouts.
#include "router/fleet/kv_event_decode.h"

#include <gtest/gtest.h>
#include <msgpuck.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tests/fakes/kv_batch_writer.h"

namespace narwhal::router::kv {
namespace {

using Mp = testing::MpWriter;

std::string Be8(uint64_t v) { return EncodeSeq(v); }

const BlockStored& Stored(const KvEventBatch& b, size_t i) {
  return std::get<BlockStored>(b.events.at(i));
}

// vLLM <= 0.23: [ts, [["BlockStored", hashes, parent, tokens, size, lora_id,
// medium, lora_name], ["BlockRemoved", hashes, medium], ["AllBlocksCleared"]], rank]
std::string PositionalBatch() {
  Mp m;
  m.Array(3).Double(1700000000.25).Array(3);
  m.Array(8).Str("BlockStored").Array(2).Uint(7).Uint(0xF00DCAFEDEADBEEFull).Nil();
  m.Tokens({1, 2, 3, 4, 5, 6, 70000, 4294967295u}).Uint(4).Nil().Str("GPU").Nil();
  m.Array(3).Str("BlockRemoved").Array(1).Uint(7).Str("GPU");
  m.Array(1).Str("AllBlocksCleared");
  m.Uint(0);
  return m.str();
}

TEST(KvEventDecodeTest, PositionalEventsOfVllm023) {
  absl::StatusOr<KvEventBatch> b = DecodeKvEventBatch(PositionalBatch());
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_DOUBLE_EQ(b->ts, 1700000000.25);
  ASSERT_EQ(b->events.size(), 3u);
  const BlockStored& s = Stored(*b, 0);
  ASSERT_EQ(s.block_hashes.size(), 2u);
  EXPECT_EQ(s.block_hashes[0].bytes, Be8(7));
  EXPECT_EQ(s.block_hashes[1].bytes, Be8(0xF00DCAFEDEADBEEFull));  // uint64 >= 2^63
  EXPECT_FALSE(s.parent.has_value());
  EXPECT_EQ(s.token_ids, (std::vector<uint32_t>{1, 2, 3, 4, 5, 6, 70000, 4294967295u}));
  EXPECT_EQ(s.block_size, 4u);
  EXPECT_EQ(s.medium, "GPU");
  EXPECT_FALSE(s.extra_keys);
  const BlockRemoved& r = std::get<BlockRemoved>(b->events[1]);
  EXPECT_EQ(r.block_hashes.at(0).bytes, Be8(7));
  EXPECT_EQ(r.medium, "GPU");
  EXPECT_TRUE(std::holds_alternative<AllBlocksCleared>(b->events[2]));
  EXPECT_EQ(b->data_parallel_rank, 0);
  EXPECT_EQ(b->unknown_events, 0);
}

TEST(KvEventDecodeTest, NamedEventsOfVllm024InAnyKeyOrderWithUnknownKeys) {
  // The v0.26 capture's fields, "type" last, a key from the future, a
  // parent hash as bytes, extra_keys with a LoRA name on one block.
  Mp m;
  m.Array(3).Double(1.5).Array(2);
  m.Map(12)
      .Str("block_hashes")
      .Array(1)
      .Uint(15760518052499183552ull)
      .Str("parent_block_hash")
      .Bin(std::string(32, '\x11'))
      .Str("token_ids")
      .Tokens({9, 8, 7, 6})
      .Str("block_size")
      .Uint(4)
      .Str("lora_id")
      .Nil()
      .Str("medium")
      .Str("GPU")
      .Str("lora_name")
      .Str("adapter-a")
      .Str("extra_keys")
      .Array(1)
      .Array(2)
      .Str("mm")
      .Uint(3)
      .Str("group_idx")
      .Uint(1)
      .Str("kv_cache_spec_kind")
      .Str("full_attention")
      .Str("ownership")
      .Map(1)
      .Str("x")
      .Array(2)
      .Nil()
      .Double(2)
      .Str("type")
      .Str("BlockStored");
  m.Map(2).Str("type").Str("BlockRemoved").Str("block_hashes").Array(1).Int(-5);
  m.Uint(2);
  absl::StatusOr<KvEventBatch> b = DecodeKvEventBatch(m.str());
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(b->events.size(), 2u);
  const BlockStored& s = Stored(*b, 0);
  EXPECT_EQ(s.block_hashes.at(0).bytes, Be8(15760518052499183552ull));
  ASSERT_TRUE(s.parent.has_value());
  EXPECT_EQ(s.parent->bytes, std::string(32, '\x11'));
  EXPECT_EQ(s.token_ids, (std::vector<uint32_t>{9, 8, 7, 6}));
  EXPECT_EQ(s.lora_name, "adapter-a");
  EXPECT_TRUE(s.extra_keys);
  EXPECT_EQ(s.group_idx, 1);
  // A signed hash keeps its two's-complement bytes (other producers).
  EXPECT_EQ(std::get<BlockRemoved>(b->events[1]).block_hashes.at(0).bytes,
            Be8(static_cast<uint64_t>(int64_t{-5})));
  EXPECT_EQ(b->data_parallel_rank, 2);
}

TEST(KvEventDecodeTest, EnvelopesOfTwoElementsAndMaps) {
  Mp two;
  two.Array(2).Uint(12).Array(1).Array(1).Str("AllBlocksCleared");
  absl::StatusOr<KvEventBatch> b = DecodeKvEventBatch(two.str());
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_DOUBLE_EQ(b->ts, 12);  // an integer time is accepted
  EXPECT_FALSE(b->data_parallel_rank.has_value());
  EXPECT_EQ(b->events.size(), 1u);

  Mp map;
  map.Map(4).Str("data_parallel_rank").Nil().Str("future").Array(0).Str("ts").Double(3);
  map.Str("events").Array(1).Map(1).Str("type").Str("AllBlocksCleared");
  b = DecodeKvEventBatch(map.str());
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_DOUBLE_EQ(b->ts, 3);
  EXPECT_EQ(b->events.size(), 1u);
  EXPECT_FALSE(b->data_parallel_rank.has_value());
}

TEST(KvEventDecodeTest, EventsOfUnknownTypesAreCountedAndSkipped) {
  Mp m;
  m.Array(3).Double(1).Array(3);
  m.Array(3).Str("BlockPinned").Map(1).Str("deep").Array(1).Array(1).Nil().Uint(1);
  m.Map(2).Str("payload").Bin("xyz").Str("type").Str("SomethingNew");
  m.Array(1).Str("AllBlocksCleared");
  m.Uint(0);
  absl::StatusOr<KvEventBatch> b = DecodeKvEventBatch(m.str());
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->unknown_events, 2);
  ASSERT_EQ(b->events.size(), 1u);
  EXPECT_TRUE(std::holds_alternative<AllBlocksCleared>(b->events[0]));
}

TEST(KvEventDecodeTest, EveryTruncationIsAnErrorNeverACrash) {
  const std::string whole = PositionalBatch();
  ASSERT_TRUE(DecodeKvEventBatch(whole).ok());
  for (size_t n = 0; n < whole.size(); ++n) {
    EXPECT_FALSE(DecodeKvEventBatch(whole.substr(0, n)).ok()) << "cut at " << n;
  }
  EXPECT_FALSE(DecodeKvEventBatch(whole + '\0').ok());  // trailing bytes
}

TEST(KvEventDecodeTest, KnownFieldsOfTheWrongTypeAreErrors) {
  auto batch_of = [](const std::function<void(Mp&)>& event) {
    Mp m;
    m.Array(3).Double(1).Array(1);
    event(m);
    m.Uint(0);
    return m.str();
  };
  const std::vector<std::string> bad = {
      // A negative token id, a token id beyond 32 bits, tokens not an array.
      batch_of(
          [](Mp& m) { m.Array(5).Str("BlockStored").Array(0).Nil().Array(1).Int(-1).Uint(1); }),
      batch_of([](Mp& m) {
        m.Array(5).Str("BlockStored").Array(0).Nil().Array(1).Uint(1ull << 32).Uint(1);
      }),
      batch_of([](Mp& m) { m.Array(5).Str("BlockStored").Array(0).Nil().Str("1 2").Uint(1); }),
      // A hash that is a string of 65 bytes, a nil hash in the list.
      batch_of([](Mp& m) {
        m.Array(5).Str("BlockStored").Array(1).Bin(std::string(65, 'h')).Nil().Array(0).Uint(1);
      }),
      batch_of([](Mp& m) { m.Array(2).Str("BlockRemoved").Array(1).Nil(); }),
      // Required fields missing (positional and named), no type.
      batch_of([](Mp& m) { m.Array(3).Str("BlockStored").Array(0).Nil(); }),
      batch_of([](Mp& m) { m.Map(2).Str("type").Str("BlockStored").Str("block_size").Uint(4); }),
      batch_of([](Mp& m) { m.Map(1).Str("block_hashes").Array(0); }),
      batch_of([](Mp& m) { m.Array(0); }),
      batch_of([](Mp& m) { m.Uint(3); }),
      batch_of([](Mp& m) { m.Array(1).Uint(3); }),
  };
  for (size_t i = 0; i < bad.size(); ++i) {
    absl::StatusOr<KvEventBatch> b = DecodeKvEventBatch(bad[i]);
    EXPECT_FALSE(b.ok()) << "case " << i;
    if (!b.ok()) {
      EXPECT_NE(b.status().message().find("event 0"), std::string::npos) << b.status();
    }
  }
  EXPECT_FALSE(DecodeKvEventBatch(Mp().Str("not a batch").str()).ok());
  EXPECT_FALSE(DecodeKvEventBatch(Mp().Array(1).Double(1).str()).ok());
  EXPECT_FALSE(DecodeKvEventBatch(Mp().Map(1).Str("ts").Double(1).str()).ok());
  EXPECT_FALSE(DecodeKvEventBatch("").ok());
}

TEST(KvEventDecodeTest, DeclaredLengthsBeyondTheDataAndHugeNestingAreRefusedCheaply) {
  // An array32 header claiming 4 billion events, a str32 claiming 4 GB.
  EXPECT_FALSE(DecodeKvEventBatch(Mp().Array(2).Double(1).Raw("\xdd\xff\xff\xff\xff").str()).ok());
  Mp bigstr;
  bigstr.Array(3).Double(1).Array(1).Array(1).Raw(
      "\xdb\xff\xff\xff\xff"
      "BlockStored");
  EXPECT_FALSE(DecodeKvEventBatch(bigstr.str()).ok());
  // An unknown field holding 100,000 nested arrays: skipped without
  // recursion; the same with its last level missing is an error.
  std::string deep;
  for (int i = 0; i < 100000; ++i) deep += '\x91';
  deep += '\xc0';
  Mp ok;
  ok.Array(3).Double(1).Array(1).Map(2).Str("type").Str("AllBlocksCleared").Str("x").Raw(deep);
  ok.Uint(0);
  EXPECT_TRUE(DecodeKvEventBatch(ok.str()).ok());
  Mp cut;
  cut.Array(3).Double(1).Array(1).Map(2).Str("type").Str("AllBlocksCleared").Str("x");
  cut.Raw(deep.substr(0, deep.size() - 1)).Uint(0);
  EXPECT_FALSE(DecodeKvEventBatch(cut.str()).ok());
}

TEST(KvEventDecodeTest, LimitsBoundEventsTokensAndBytes) {
  KvDecodeLimits limits;
  limits.max_events = 2;
  limits.max_tokens = 3;
  Mp events;
  events.Array(2).Double(1).Array(3);
  for (int i = 0; i < 3; ++i) events.Array(1).Str("AllBlocksCleared");
  EXPECT_FALSE(DecodeKvEventBatch(events.str(), limits).ok());
  Mp tokens;
  tokens.Array(2).Double(1).Array(1).Array(5).Str("BlockStored").Array(1).Uint(1).Nil();
  tokens.Tokens({1, 2, 3, 4}).Uint(4);
  EXPECT_FALSE(DecodeKvEventBatch(tokens.str(), limits).ok());
  limits.max_tokens = 4;
  EXPECT_TRUE(DecodeKvEventBatch(tokens.str(), limits).ok());
  limits.max_payload_bytes = tokens.str().size() - 1;
  EXPECT_FALSE(DecodeKvEventBatch(tokens.str(), limits).ok());
}

TEST(KvEventDecodeTest, SequenceFramesAreEightBytesBigEndian) {
  EXPECT_EQ(DecodeSeq(std::string("\0\0\0\0\0\0\x01\x02", 8)).value(), 258u);
  EXPECT_EQ(DecodeSeq(EncodeSeq(0x0102030405060708ull)).value(), 0x0102030405060708ull);
  EXPECT_FALSE(DecodeSeq("1234567").ok());
  EXPECT_FALSE(DecodeSeq("123456789").ok());
}

TEST(KvEventDecodeTest, ReplayRepliesWithAndWithoutTheTopicFrame) {
  const std::string payload = PositionalBatch();
  const std::string seq = EncodeSeq(41);
  // Before vLLM PR #45177: ["", seq, payload]; after: ["", topic, seq, payload].
  absl::StatusOr<ReplayReply> old_layout = DecodeReplayReply({"", seq, payload});
  ASSERT_TRUE(old_layout.ok()) << old_layout.status();
  EXPECT_FALSE(old_layout->end);
  EXPECT_EQ(old_layout->seq, 41u);
  EXPECT_EQ(old_layout->payload, payload);
  absl::StatusOr<ReplayReply> new_layout = DecodeReplayReply({"", "kv@pod-1@m", seq, payload});
  ASSERT_TRUE(new_layout.ok()) << new_layout.status();
  EXPECT_EQ(new_layout->seq, 41u);
  // The end marker, in both layouts: sequence -1 and an empty payload.
  const std::string end = EncodeSeq(kReplayEndSeq);
  EXPECT_EQ(end, std::string(8, '\xff'));
  EXPECT_TRUE(DecodeReplayReply({"", end, ""}).value().end);
  EXPECT_TRUE(DecodeReplayReply({"", "", end, ""}).value().end);
  // Malformed replies.
  EXPECT_FALSE(DecodeReplayReply({seq, payload}).ok());
  EXPECT_FALSE(DecodeReplayReply({"x", seq, payload}).ok());
  EXPECT_FALSE(DecodeReplayReply({"", "short", payload}).ok());
  EXPECT_FALSE(DecodeReplayReply({"", end, payload}).ok());
  EXPECT_FALSE(DecodeReplayReply({"", seq, ""}).ok());
  EXPECT_FALSE(DecodeReplayReply({"", "t", seq, payload, "extra"}).ok());
  EXPECT_EQ(ReplayRequest(7), (std::vector<std::string>{"", EncodeSeq(7)}));
}

}  // namespace
}  // namespace narwhal::router::kv
