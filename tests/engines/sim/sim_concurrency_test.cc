// Many concurrent streams against one narwhal-sim process. The number of
// streams is NARWHAL_SIM_STREAMS (default 300), the engine's token interval
// NARWHAL_SIM_TOKEN_INTERVAL_MS (default 100; 16 tokens per stream). Longer
// intervals let large counts overlap fully when measuring capacity.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/barrier.h"
#include "absl/time/clock.h"
#include "engines/sim/text_gen.h"
#include "gtest/gtest.h"
#include "tests/engines/sim/sim_test_util.h"

namespace narwhal::testing {
namespace {

using nlohmann::json;

int EnvInt(const char* name, int fallback) {
  const char* text = std::getenv(name);
  const int n = text == nullptr ? 0 : std::atoi(text);
  return n > 0 ? n : fallback;
}

// The largest number of records whose [at, ended_at] intervals overlap.
int MaxOverlap(const json& records) {
  std::vector<std::pair<double, int>> edges;
  for (const json& r : records) {
    if (r["path"] != "/v1/chat/completions" || r["ended_at"].is_null()) continue;
    edges.emplace_back(r["at"].get<double>(), 1);
    edges.emplace_back(r["ended_at"].get<double>(), -1);
  }
  std::sort(edges.begin(), edges.end());
  int open = 0;
  int peak = 0;
  for (const auto& [at, delta] : edges) peak = std::max(peak, open += delta);
  return peak;
}

TEST(SimConcurrencyTest, ManyConcurrentStreamsComplete) {
  const int streams = EnvInt("NARWHAL_SIM_STREAMS", 300);
  const int interval_ms = EnvInt("NARWHAL_SIM_TOKEN_INTERVAL_MS", 100);
  auto sim = SimProcess::Start({"--token-interval-ms", std::to_string(interval_ms),
                                "--threads",
                                std::to_string(std::max(512, streams + 64))});
  ASSERT_TRUE(sim.ok()) << sim.status();
  const std::string host = (*sim)->host();
  const int port = (*sim)->port();
  constexpr int kTokens = 16;

  std::atomic<int> complete{0};
  std::atomic<int> wrong{0};
  std::vector<std::string> failures(streams);
  absl::Barrier* start = new absl::Barrier(streams);
  std::vector<std::thread> threads;
  threads.reserve(streams);
  const absl::Time began = absl::Now();
  for (int i = 0; i < streams; ++i) {
    threads.emplace_back([&, i] {
      const std::string prompt = "stream " + std::to_string(i);
      HttpCaptureOptions options;
      options.read_timeout = absl::Seconds(120);
      if (start->Block()) delete start;
      const HttpCapture capture =
          PostCapture(host, port, "/v1/chat/completions",
                      ChatBody(prompt, kTokens, true).dump(), options);
      if (capture.status == 200 && capture.saw_done() &&
          StreamText(capture) == sim::GenerateText(prompt, kTokens)) {
        complete.fetch_add(1);
      } else {
        wrong.fetch_add(1);
        failures[i] = "status " + std::to_string(capture.status) + " error " +
                      httplib::to_string(capture.error);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const absl::Duration elapsed = absl::Now() - began;
  for (const std::string& failure : failures) {
    if (!failure.empty()) {
      ADD_FAILURE() << failure;
      break;
    }
  }
  EXPECT_EQ(complete.load(), streams);
  EXPECT_EQ(wrong.load(), 0);
  // Served side by side, not one after another.
  absl::StatusOr<json> records = (*sim)->Requests();
  ASSERT_TRUE(records.ok()) << records.status();
  const int overlap = MaxOverlap(*records);
  EXPECT_GE(overlap, streams / 2) << "peak concurrency " << overlap;
  std::printf("%d streams: all done in %s, peak concurrency %d\n", streams,
              absl::FormatDuration(elapsed).c_str(), overlap);
}

}  // namespace
}  // namespace narwhal::testing
