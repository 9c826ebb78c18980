// The KV-event path's own cost (SPEC §14): decoding vLLM's msgpack batches,
// applying them to one engine's block index, the index's memory under 1M
// events, and the leading-run lookup placement makes per request. Goals:
// decoding keeps up with 100k events/s on one core; the index stays within
// kv_events.max_blocks_per_engine whatever the number of events.
//
//   build/bin/kv_events_bench
//   build/bin/kv_events_bench --benchmark_filter=Million
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "router/fleet/kv_block_index.h"
#include "router/fleet/kv_event_decode.h"
#include "tests/fakes/kv_batch_writer.h"

namespace narwhal::router::kv {
namespace {

namespace nt = ::narwhal::testing;

constexpr uint32_t kBlockTokens = 16;

// Tokens of block `n`: distinct per block.
std::vector<uint32_t> BlockTokens(uint64_t n) {
  std::vector<uint32_t> tokens(kBlockTokens);
  for (uint32_t i = 0; i < kBlockTokens; ++i) {
    tokens[i] = static_cast<uint32_t>((n * 2654435761ULL + i * 40503ULL) % 151643);
  }
  return tokens;
}

// A batch as an engine publishes it during one step: `events` BlockStored
// events of one block each, every block chained to the one before, starting
// at block `first`.
std::string StoredBatch(uint64_t first, int events, nt::EventForm form) {
  std::vector<nt::EventSpec> specs;
  for (int i = 0; i < events; ++i) {
    const uint64_t n = first + static_cast<uint64_t>(i);
    nt::StoredSpec s;
    s.hashes = {n + 1};
    if (n > 0) s.parent = n;
    s.tokens = BlockTokens(n);
    s.block_size = kBlockTokens;
    specs.emplace_back(std::move(s));
  }
  return nt::EncodeBatch(specs, form);
}

void BM_DecodeBatch(benchmark::State& state) {
  const int events = static_cast<int>(state.range(0));
  const nt::EventForm form = state.range(1) == 0 ? nt::EventForm::kArray : nt::EventForm::kMap;
  const std::string payload = StoredBatch(0, events, form);
  for (auto _ : state) {
    absl::StatusOr<KvEventBatch> batch = DecodeKvEventBatch(payload, KvDecodeLimits{});
    if (!batch.ok()) state.SkipWithError("decode failed");
    benchmark::DoNotOptimize(batch);
  }
  state.SetItemsProcessed(state.iterations() * events);
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(payload.size()));
}
BENCHMARK(BM_DecodeBatch)->ArgsProduct({{1, 16, 64}, {0, 1}})->ArgNames({"events", "map"});

// Decoding and applying, as the subscriber's thread does for each batch:
// a stream of fresh blocks into an index at its bound (so every store also
// evicts the oldest block).
void BM_DecodeAndApply(benchmark::State& state) {
  const int events = 64;
  KvBlockIndex index(KvIndexLimits{kBlockTokens, 1u << 16});
  std::vector<std::string> payloads;
  for (int b = 0; b < 2048; ++b) {
    payloads.push_back(StoredBatch(static_cast<uint64_t>(b) * events, events, nt::EventForm::kMap));
  }
  size_t next = 0;
  KvApplyCounts counts;
  for (auto _ : state) {
    absl::StatusOr<KvEventBatch> batch =
        DecodeKvEventBatch(payloads[next++ % payloads.size()], KvDecodeLimits{});
    if (!batch.ok()) state.SkipWithError("decode failed");
    index.Apply(*batch, &counts);
  }
  state.SetItemsProcessed(state.iterations() * events);
  state.counters["blocks"] = static_cast<double>(index.blocks());
}
BENCHMARK(BM_DecodeAndApply);

long ResidentBytes() {
  long pages = 0, resident = 0;
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
  std::fclose(f);
  return resident * sysconf(_SC_PAGESIZE);
}

// One engine's index through 1M events (stores in chains of 8 blocks, a
// removal of an old chain after every fourth chain): the blocks it keeps
// and the memory that takes, against the bound.
void BM_MillionEvents(benchmark::State& state) {
  const size_t bound = static_cast<size_t>(state.range(0));
  for (auto _ : state) {
    const long before = ResidentBytes();
    KvBlockIndex index(KvIndexLimits{kBlockTokens, bound});
    KvApplyCounts counts;
    uint64_t block = 0;
    long long applied = 0;
    while (applied < 1000000) {
      BlockStored stored;
      for (int i = 0; i < 8; ++i, ++block) {
        EngineBlockHash h;
        h.bytes.assign(reinterpret_cast<const char*>(&block), sizeof(block));
        stored.block_hashes.push_back(h);
        const std::vector<uint32_t> tokens = BlockTokens(block);
        stored.token_ids.insert(stored.token_ids.end(), tokens.begin(), tokens.end());
      }
      stored.block_size = kBlockTokens;
      stored.medium = "GPU";
      index.Apply(KvEvent(std::move(stored)), &counts);
      ++applied;
      if (block % 32 == 0 && block > 64) {
        BlockRemoved removed;
        for (uint64_t old = block - 64; old < block - 56; ++old) {
          EngineBlockHash h;
          h.bytes.assign(reinterpret_cast<const char*>(&old), sizeof(old));
          removed.block_hashes.push_back(h);
        }
        removed.medium = "GPU";
        index.Apply(KvEvent(std::move(removed)), &counts);
        ++applied;
      }
    }
    state.counters["blocks"] = static_cast<double>(index.blocks());
    state.counters["bound"] = static_cast<double>(bound);
    state.counters["evicted"] = static_cast<double>(counts.evicted);
    state.counters["rss_growth_MiB"] = static_cast<double>(ResidentBytes() - before) / (1 << 20);
    state.counters["bytes_per_block"] =
        static_cast<double>(ResidentBytes() - before) / static_cast<double>(index.blocks());
    benchmark::DoNotOptimize(index);
  }
}
BENCHMARK(BM_MillionEvents)
    ->Arg(1 << 16)
    ->Arg(1 << 18)
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

// Placement's question for one producer: how many of a 4,096-token
// prompt's leading blocks it holds (a full match: the worst case).
void BM_LeadingBlocks(benchmark::State& state) {
  KvBlockIndex index(KvIndexLimits{kBlockTokens, 1u << 18});
  KvApplyCounts counts;
  std::vector<uint32_t> prompt;
  BlockStored stored;
  for (uint64_t b = 0; b < 256; ++b) {
    EngineBlockHash h;
    h.bytes.assign(reinterpret_cast<const char*>(&b), sizeof(b));
    stored.block_hashes.push_back(h);
    const std::vector<uint32_t> tokens = BlockTokens(b);
    stored.token_ids.insert(stored.token_ids.end(), tokens.begin(), tokens.end());
  }
  prompt = stored.token_ids;
  stored.block_size = kBlockTokens;
  stored.medium = "GPU";
  index.Apply(KvEvent(std::move(stored)), &counts);
  for (auto _ : state) benchmark::DoNotOptimize(index.LeadingBlocks(prompt));
  state.counters["matched"] = static_cast<double>(index.LeadingBlocks(prompt));
}
BENCHMARK(BM_LeadingBlocks);

}  // namespace
}  // namespace narwhal::router::kv

BENCHMARK_MAIN();
