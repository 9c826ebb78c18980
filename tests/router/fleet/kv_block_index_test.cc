// The per-engine block index (router/fleet/kv_block_index.h): blocks keyed
// by token content along their chain, duplicate stores refcounted, what a
// prompt's tokens alone cannot match skipped, AllBlocksCleared, and the
// memory bound.
#include "router/fleet/kv_block_index.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace narwhal::router::kv {
namespace {

EngineBlockHash H(uint64_t v) { return EngineBlockHash{EncodeSeq(v)}; }

// Tokens of `blocks` blocks of 4, block i = {10i+1 .. 10i+4} + `salt`.
std::vector<uint32_t> Tokens(size_t blocks, uint32_t salt = 0, size_t first = 0) {
  std::vector<uint32_t> t;
  for (size_t b = first; b < first + blocks; ++b) {
    for (uint32_t k = 1; k <= 4; ++k) t.push_back(static_cast<uint32_t>(10 * b) + k + salt);
  }
  return t;
}

BlockStored Stored(std::vector<uint64_t> hashes, std::optional<uint64_t> parent,
                   std::vector<uint32_t> tokens) {
  BlockStored s;
  for (uint64_t h : hashes) s.block_hashes.push_back(H(h));
  if (parent) s.parent = H(*parent);
  s.token_ids = std::move(tokens);
  s.block_size = 4;
  s.medium = "GPU";
  return s;
}

BlockRemoved Removed(std::vector<uint64_t> hashes) {
  BlockRemoved r;
  for (uint64_t h : hashes) r.block_hashes.push_back(H(h));
  r.medium = "GPU";
  return r;
}

class KvBlockIndexTest : public ::testing::Test {
 protected:
  KvBlockIndex index_{KvIndexLimits{.block_size = 4, .max_blocks = 1000}};
  KvApplyCounts counts_;
};

TEST_F(KvBlockIndexTest, LeadingRunFollowsTheChainAcrossEvents) {
  index_.Apply(Stored({1, 2}, std::nullopt, Tokens(2)), &counts_);
  // The chain continues in a later event: its parent is block 2.
  index_.Apply(Stored({3}, 2, Tokens(1, 0, 2)), &counts_);
  EXPECT_EQ(counts_.stored, 3);
  EXPECT_EQ(index_.blocks(), 3u);

  std::vector<uint32_t> prompt = Tokens(5);
  EXPECT_EQ(index_.LeadingBlocks(prompt), 3u);
  // A partial block at the end is never counted.
  prompt = Tokens(3);
  prompt.push_back(99);
  EXPECT_EQ(index_.LeadingBlocks(prompt), 3u);
  // A prompt that differs in block 2 matches blocks 0-1 only; one that
  // differs in block 0 nothing, even where later blocks' tokens agree.
  prompt = Tokens(3);
  prompt[9] = 7777;
  EXPECT_EQ(index_.LeadingBlocks(prompt), 2u);
  prompt = Tokens(3);
  prompt[0] = 7777;
  EXPECT_EQ(index_.LeadingBlocks(prompt), 0u);
  EXPECT_EQ(index_.LeadingBlocks({}), 0u);
}

TEST_F(KvBlockIndexTest, SameTokensInAnotherPositionAreAnotherBlock) {
  // Block 1's tokens stored as a chain's first block are not block 1 of a
  // prompt: the key is the content with everything before it.
  index_.Apply(Stored({5}, std::nullopt, Tokens(1, 0, 1)), &counts_);
  EXPECT_EQ(index_.LeadingBlocks(Tokens(2)), 0u);
  EXPECT_EQ(index_.LeadingBlocks(Tokens(1, 0, 1)), 1u);
}

TEST_F(KvBlockIndexTest, AnUnknownParentLeavesTheBlocksOut) {
  index_.Apply(Stored({3, 4}, 2, Tokens(2, 0, 2)), &counts_);
  EXPECT_EQ(counts_.skipped, 2);
  EXPECT_EQ(index_.blocks(), 0u);
}

TEST_F(KvBlockIndexTest, DuplicateStoresAreRefcounted) {
  index_.Apply(Stored({1}, std::nullopt, Tokens(1)), &counts_);
  index_.Apply(Stored({1}, std::nullopt, Tokens(1)), &counts_);  // a second physical block
  index_.Apply(Removed({1}), &counts_);
  EXPECT_EQ(index_.LeadingBlocks(Tokens(1)), 1u) << "one copy is left";
  index_.Apply(Removed({1}), &counts_);
  EXPECT_EQ(index_.LeadingBlocks(Tokens(1)), 0u);
  EXPECT_EQ(index_.blocks(), 0u);
  index_.Apply(Removed({1}), &counts_);  // over-removal is counted, harmless
  EXPECT_EQ(counts_.removed, 2);
  EXPECT_EQ(counts_.skipped, 1);
}

TEST_F(KvBlockIndexTest, RemovingAMiddleBlockEndsTheRunThere) {
  index_.Apply(Stored({1, 2, 3}, std::nullopt, Tokens(3)), &counts_);
  index_.Apply(Removed({2}), &counts_);
  EXPECT_EQ(index_.LeadingBlocks(Tokens(3)), 1u);
}

TEST_F(KvBlockIndexTest, AllBlocksClearedEmptiesTheIndex) {
  index_.Apply(Stored({1, 2}, std::nullopt, Tokens(2)), &counts_);
  index_.Apply(KvEvent(AllBlocksCleared{}), &counts_);
  EXPECT_EQ(index_.blocks(), 0u);
  EXPECT_EQ(index_.LeadingBlocks(Tokens(2)), 0u);
  EXPECT_EQ(counts_.cleared, 1);
  // The chain starts again from nothing.
  index_.Apply(Stored({1}, std::nullopt, Tokens(1)), &counts_);
  EXPECT_EQ(index_.LeadingBlocks(Tokens(2)), 1u);
}

TEST_F(KvBlockIndexTest, WhatTokensAloneCannotMatchIsSkipped) {
  BlockStored cpu = Stored({1}, std::nullopt, Tokens(1));
  cpu.medium = "CPU";
  BlockStored group = Stored({2}, std::nullopt, Tokens(1));
  group.group_idx = 1;
  BlockStored size = Stored({3}, std::nullopt, Tokens(2));
  size.block_size = 8;
  BlockStored extra = Stored({4}, std::nullopt, Tokens(1));
  extra.extra_keys = true;
  BlockStored lora = Stored({5}, std::nullopt, Tokens(1));
  lora.lora_name = "adapter";
  BlockStored short_tokens = Stored({6, 7}, std::nullopt, Tokens(1));
  for (const BlockStored& e : {cpu, group, size, extra, lora, short_tokens}) {
    index_.Apply(e, &counts_);
  }
  EXPECT_EQ(index_.blocks(), 0u);
  EXPECT_EQ(counts_.skipped, 7);
  EXPECT_EQ(index_.LeadingBlocks(Tokens(1)), 0u);
  // No medium at all counts as the GPU's (older engines).
  BlockStored plain = Stored({8}, std::nullopt, Tokens(1));
  plain.medium = "";
  index_.Apply(plain, &counts_);
  EXPECT_EQ(index_.LeadingBlocks(Tokens(1)), 1u);
}

TEST(KvBlockIndexBoundTest, TheOldestBlocksGoAtTheBound) {
  KvBlockIndex index(KvIndexLimits{.block_size = 4, .max_blocks = 4});
  KvApplyCounts counts;
  index.Apply(Stored({1, 2, 3, 4, 5, 6}, std::nullopt, Tokens(6)), &counts);
  EXPECT_EQ(index.blocks(), 4u);
  EXPECT_EQ(counts.evicted, 2);
  // Blocks 0 and 1 went: the run from the prompt's start is gone (an
  // under-estimate, never a block the engine lacks).
  EXPECT_EQ(index.LeadingBlocks(Tokens(6)), 0u);
  // A block stored again is the youngest: the next eviction takes block 2.
  index.Apply(Stored({1}, std::nullopt, Tokens(1)), &counts);
  EXPECT_EQ(counts.evicted, 3);
  EXPECT_EQ(index.LeadingBlocks(Tokens(6)), 1u);
}

TEST(KvChainKeyTest, DependsOnEveryTokenItsOrderAndTheParent) {
  const std::vector<uint32_t> a = {1, 2, 3, 4};
  const std::vector<uint32_t> b = {2, 1, 3, 4};
  const std::vector<uint32_t> c = {1, 2, 3};
  EXPECT_NE(ChainKey(kChainRoot, a), ChainKey(kChainRoot, b));
  EXPECT_NE(ChainKey(kChainRoot, a), ChainKey(kChainRoot, c));
  EXPECT_NE(ChainKey(kChainRoot, a), ChainKey(ChainKey(kChainRoot, a), a));
  EXPECT_EQ(ChainKey(kChainRoot, a), ChainKey(kChainRoot, a));
}

}  // namespace
}  // namespace narwhal::router::kv
