// Cost of one cache-aware prefill placement decision at 10k indexed
// prefixes: hashing the rendered prompt into chunk keys (PrefixIndex::Key)
// plus Fleet::PickAndReserve (candidates, prefix match per producer, the
// choice, indexing the prompt) and the release. Goal: at most 20 us per
// decision. Time per iteration = time per decision.
//
//   build/bin/placement_bench
//   build/bin/placement_bench --benchmark_filter=CacheAware
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "router/common/metrics.h"
#include "router/fleet/fleet.h"
#include "router/fleet/prefix_index.h"

namespace narwhal::router {
namespace {

constexpr int kProducers = 4;
constexpr int kPrefixes = 10000;

// A deterministic pseudo-random text of `bytes` bytes, distinct per `seed`.
std::string Text(uint64_t seed, size_t bytes) {
  static constexpr char kLetters[] = "abcdefghijklmnopqrstuvwxyz      ";
  std::string out(bytes, ' ');
  uint64_t x = seed * 0x9E3779B97F4A7C15ULL + 1;
  for (char& c : out) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    c = kLetters[x % 32];
  }
  return out;
}

Settings BenchSettings(const std::string& policy, size_t prompt_bytes) {
  Settings s;
  s.model = "m";
  for (int i = 0; i < kProducers; ++i) {
    const std::string iid = "p" + std::to_string(i);
    s.engines.push_back(EngineSettings{iid, "http://" + iid + ":8000", Role::kPrefill});
  }
  s.engines.push_back(EngineSettings{"d0", "http://d0:8000", Role::kDecode});
  s.placement.prefill = policy;
  // Room for every prefix on every producer it lands on.
  s.placement.index_chunks =
      static_cast<int>(2 * kPrefixes * (prompt_bytes / PrefixIndex::kChunkBytes) / kProducers);
  return s;
}

// args: prompt bytes (system prefix of that size plus a 200-byte question).
void BM_Decision(benchmark::State& state, const std::string& policy) {
  const size_t prompt_bytes = static_cast<size_t>(state.range(0));
  const Settings settings = BenchSettings(policy, prompt_bytes);
  RealClock clock;
  prometheus::Registry registry;
  Metrics metrics(registry);
  Fleet fleet(settings, clock, &metrics);
  std::vector<std::string> prefixes;
  prefixes.reserve(kPrefixes);
  for (int i = 0; i < kPrefixes; ++i) {
    prefixes.push_back(Text(static_cast<uint64_t>(i), prompt_bytes));
    const PromptKey key = PrefixIndex::Key(prefixes.back());
    fleet.PickAndReserve(Phase::kPrefill, {}, "",
                         PlacementPrompt{&key, {}, 16});  // released at once
  }
  size_t indexed = 0;
  for (const EngineSnapshot& s : fleet.admin().Snapshot()) indexed += s.prefix_index_chunks;
  uint64_t n = 0;
  for (auto _ : state) {
    const std::string& prefix = prefixes[(n * 7919) % kPrefixes];
    nlohmann::json body = {{"prompt", prefix + Text(1000000 + n, 200)}};
    const PromptKey key = PrefixIndex::Key(PromptText(engines::Api::kCompletions, body));
    std::optional<Fleet::Reservation> r =
        fleet.PickAndReserve(Phase::kPrefill, {}, "", PlacementPrompt{&key, {}, 16});
    benchmark::DoNotOptimize(r);
    ++n;
  }
  state.counters["indexed_prefixes"] = kPrefixes;
  state.counters["indexed_chunks"] = static_cast<double>(indexed);
}

void BM_CacheAware(benchmark::State& state) { BM_Decision(state, "cache_aware"); }
void BM_LeastLoaded(benchmark::State& state) { BM_Decision(state, "least_loaded"); }

BENCHMARK(BM_CacheAware)->Arg(2048)->Arg(8192)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_LeastLoaded)->Arg(2048)->Arg(8192)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace narwhal::router

BENCHMARK_MAIN();
