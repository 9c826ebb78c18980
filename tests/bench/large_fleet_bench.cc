// What the router's own work costs as the fleet grows, in process: a Fleet of
// N engines (half prefill, half decode) with the router's registry
// (router/common/metrics.h). tests/bench/large_fleet.sh measures the real
// binary end to end. Goal at 1,024 engines: a scrape well under 100 ms, and
// no O(N) work per request or per probe beyond a scan. Time per iteration:
//   Collect         prometheus-cpp's Registry::Collect (copies every series)
//   TextSerializer  prometheus-cpp's text rendering of that (before)
//   MetricsText     router/common/metrics_text.h's rendering (now)
//   Scrape          GET /metrics' handler: Fleet::PublishAll, Collect,
//                   MetricsText
//   ScrapeTextSerializer  the same with prometheus-cpp's rendering (before)
//   RecordSuccess   one leg's success reaching the fleet (two per request)
//   LivenessSweep   the monitor taking a liveness check of every engine and
//                   completing each (one sweep; divide by N for one probe)
//
//   build/bin/large_fleet_bench
//   build/bin/large_fleet_bench --benchmark_filter=/1024
#include <benchmark/benchmark.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <memory>
#include <string>
#include <vector>

#include "router/common/clock.h"
#include "router/common/metrics.h"
#include "router/common/metrics_text.h"
#include "router/common/settings.h"
#include "router/fleet/fleet.h"

namespace narwhal::router {
namespace {

// The registry of a router over `engines` engines (liveness checks due at
// once, for the sweep).
struct Router {
  explicit Router(int engines) : metrics(registry) {
    Settings s;
    s.model = "m";
    s.recovery.liveness_interval_s = 1e-9;
    for (int i = 0; i < engines; ++i) {
      const bool prefill = i < engines / 2;
      const std::string iid = (prefill ? "p" : "d") + std::to_string(i);
      s.engines.push_back(EngineSettings{iid, "http://127.0.0.1:" + std::to_string(10000 + i),
                                         prefill ? Role::kPrefill : Role::kDecode});
    }
    fleet = std::make_unique<Fleet>(s, clock, &metrics);
  }
  RealClock clock;
  prometheus::Registry registry;
  Metrics metrics;
  std::unique_ptr<Fleet> fleet;
};

void Report(benchmark::State& state, const std::string& text) {
  state.counters["bytes"] = static_cast<double>(text.size());
}

void BM_Collect(benchmark::State& state) {
  Router router(static_cast<int>(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(router.registry.Collect());
}

void BM_TextSerializer(benchmark::State& state) {
  Router router(static_cast<int>(state.range(0)));
  const std::vector<prometheus::MetricFamily> families = router.registry.Collect();
  std::string text;
  for (auto _ : state) {
    text = prometheus::TextSerializer().Serialize(families);
    benchmark::DoNotOptimize(text);
  }
  Report(state, text);
}

void BM_MetricsText(benchmark::State& state) {
  Router router(static_cast<int>(state.range(0)));
  const std::vector<prometheus::MetricFamily> families = router.registry.Collect();
  std::string text;
  for (auto _ : state) {
    text = MetricsText(families);
    benchmark::DoNotOptimize(text);
  }
  Report(state, text);
}

void BM_Scrape(benchmark::State& state) {
  Router router(static_cast<int>(state.range(0)));
  std::string text;
  for (auto _ : state) {
    router.fleet->admin().PublishAll();
    text = MetricsText(router.registry.Collect());
    benchmark::DoNotOptimize(text);
  }
  Report(state, text);
}

void BM_ScrapeTextSerializer(benchmark::State& state) {
  Router router(static_cast<int>(state.range(0)));
  std::string text;
  for (auto _ : state) {
    router.fleet->admin().PublishAll();
    text = prometheus::TextSerializer().Serialize(router.registry.Collect());
    benchmark::DoNotOptimize(text);
  }
  Report(state, text);
}

void BM_RecordSuccess(benchmark::State& state) {
  const int engines = static_cast<int>(state.range(0));
  Router router(engines);
  const std::string iid = "d" + std::to_string(engines - 1);
  for (auto _ : state) router.fleet->control().RecordSuccess(iid, Success::kDecodeDone);
}

void BM_LivenessSweep(benchmark::State& state) {
  Router router(static_cast<int>(state.range(0)));
  size_t probes = 0;
  for (auto _ : state) {
    const std::vector<ProbeTask> tasks = router.fleet->control().TakeDueProbes();
    for (const ProbeTask& t : tasks)
      router.fleet->control().CompleteProbe(t, ProbeOutcome::kPassed, "ok", "");
    probes += tasks.size();
  }
  state.counters["probes"] =
      benchmark::Counter(static_cast<double>(probes), benchmark::Counter::kAvgIterations);
}

BENCHMARK(BM_Collect)->Arg(64)->Arg(1024)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_TextSerializer)->Arg(64)->Arg(1024)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_MetricsText)->Arg(64)->Arg(1024)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Scrape)->Arg(64)->Arg(1024)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ScrapeTextSerializer)->Arg(64)->Arg(1024)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_RecordSuccess)->Arg(64)->Arg(1024)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_LivenessSweep)->Arg(64)->Arg(1024)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace narwhal::router

BENCHMARK_MAIN();
