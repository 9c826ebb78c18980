// KV-cache events end to end (SPEC §14, B26): narwhal-serve subscribes to the
// events its narwhal-sim engines publish (engines[].kv_events) and indexes
// what each holds — a producer the prompts it computed, a consumer the ones
// it pulled — until the index's block count equals the engine's own
// (AllBlocksCleared included); a
// reload that takes an engine's endpoint away drops its index, one that
// gives it back subscribes again, and the routed requests never wait on it.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "nlohmann/json.hpp"
#include "tests/e2e/e2e_util.h"

namespace narwhal::testing {
namespace {

// `blocks` full blocks, then one token more.
std::string KvPrompt(const std::string& tag, int blocks) {
  return SimBlocksText(tag + " asks", blocks) + "end.";
}

bool KvHasSeries(ServeProcess& router, const std::string& name, const std::string& iid) {
  for (const MetricSample& s : ParseMetrics(HttpGet(router.http_port(), "/metrics").body)) {
    if (s.name == name && s.labels.count("iid") != 0 && s.labels.at("iid") == iid) return true;
  }
  return false;
}

long long KvSimBlocks(SimProcess& sim) {
  return json::parse(HttpGet(sim.port(), "/sim/prefix_cache").body)["blocks"].get<long long>();
}

TEST(ServeKvEventsTest, B26_TheRouterIndexesWhatEachEngineHolds) {
  std::map<std::string, std::unique_ptr<SimProcess>> sims;
  std::map<std::string, json> endpoints;
  for (const auto& [iid, role] :
       std::vector<std::pair<std::string, std::string>>{{"p0", "prefill"}, {"d0", "decode"}}) {
    auto sim = SimProcess::Start({"--engine-id", iid, "--role", role, "--token-interval-ms", "1",
                                  "--prefix-cache-blocks", "64", "--kv-events-port", "0",
                                  "--kv-events-replay-port", "0"});
    ASSERT_TRUE(sim.ok()) << sim.status();
    const json info = (*sim)->Info().value();
    endpoints[iid] = {
        {"kv_events", "tcp://127.0.0.1:" + std::to_string(info["kv_events_port"].get<int>())},
        {"kv_events_replay",
         "tcp://127.0.0.1:" + std::to_string(info["kv_events_replay_port"].get<int>())}};
    sims[iid] = std::move(*sim);
  }
  json config =
      FleetConfig({{"p0", sims["p0"]->url(), "prefill"}, {"d0", sims["d0"]->url(), "decode"}},
                  {{"membership", {{"config_poll_s", 0}}}});
  for (json& e : config["engines"]) e.update(endpoints[e["iid"].get<std::string>()]);
  ServeOptions options;
  options.config = config;
  auto started = ServeProcess::Start(std::move(options));
  ASSERT_TRUE(started.ok()) << started.status();
  ServeProcess& router = **started;
  int sent = 0;
  auto send = [&](const std::string& prompt) {
    const HttpResult r =
        HttpPostRaw(router.http_port(), kCompletions, Completion(prompt, 2, false).dump());
    EXPECT_EQ(r.status, 200) << r.body;
    ++sent;
  };

  // Until both subscriptions are live (a SUB misses what is published
  // before its subscription arrives), requests warm them up.
  ASSERT_TRUE(WaitUntil(
      [&] {
        send(KvPrompt("warm-up " + std::to_string(sent), 1));
        return ScrapedMetric(router, "narwhal_kv_events_total",
                             {{"iid", "p0"}, {"kind", "stored"}}) > 0 &&
               ScrapedMetric(router, "narwhal_kv_events_total",
                             {{"iid", "d0"}, {"kind", "stored"}}) > 0;
      },
      absl::Seconds(15)))
      << router.StderrTail();
  // Blocks stored before a subscription was live are unknown to the index
  // (an under-estimate). Emptying the engines' caches publishes
  // AllBlocksCleared: from here on the index must equal the engines' count
  // exactly — the producer computed each prompt, the consumer pulled it.
  for (const char* iid : {"p0", "d0"}) {
    httplib::Client client("127.0.0.1", sims[iid]->port());
    ASSERT_TRUE(client.Delete("/sim/prefix_cache"));
    EXPECT_TRUE(WaitUntil(
        [&] {
          return ScrapedMetric(router, "narwhal_kv_index_blocks", {{"iid", iid}}) == 0;
        },
        absl::Seconds(15)))
        << iid;
  }
  EXPECT_GE(ScrapedMetric(router, "narwhal_kv_events_total", {{"kind", "cleared"}}), 2);
  for (int k = 0; k < 3; ++k) send(KvPrompt("question " + std::to_string(k), 4));
  for (const char* iid : {"p0", "d0"}) {
    SimProcess& sim = *sims[iid];
    EXPECT_TRUE(WaitUntil(
        [&] {
          return ScrapedMetric(router, "narwhal_kv_index_blocks", {{"iid", iid}}) ==
                 static_cast<double>(KvSimBlocks(sim));
        },
        absl::Seconds(15)))
        << iid << ": index " << ScrapedMetric(router, "narwhal_kv_index_blocks", {{"iid", iid}})
        << ", engine " << KvSimBlocks(sim);
    EXPECT_GE(KvSimBlocks(sim), 12);
  }
  EXPECT_EQ(ScrapedMetric(router, "narwhal_kv_event_gaps_total", {}), 0);

  // A reload without d0's endpoint drops its index; p0's stays.
  json next = config;
  for (json& e : next["engines"]) {
    if (e["iid"] == "d0") {
      e.erase("kv_events");
      e.erase("kv_events_replay");
    }
  }
  {
    std::ofstream out(router.scratch_dir() + "/fleet.json.tmp", std::ios::trunc);
    out << next.dump(2);
  }
  std::rename((router.scratch_dir() + "/fleet.json.tmp").c_str(),
              (router.scratch_dir() + "/fleet.json").c_str());
  router.Signal(SIGHUP);
  EXPECT_TRUE(WaitUntil([&] { return !KvHasSeries(router, "narwhal_kv_index_blocks", "d0"); },
                        absl::Seconds(15)))
      << router.StderrTail();
  EXPECT_TRUE(KvHasSeries(router, "narwhal_kv_index_blocks", "p0"));
  send(KvPrompt("after the reload", 2));
  EXPECT_TRUE(WaitUntil(
      [&] {
        return ScrapedMetric(router, "narwhal_kv_index_blocks", {{"iid", "p0"}}) ==
               static_cast<double>(KvSimBlocks(*sims["p0"]));
      },
      absl::Seconds(15)));
  EXPECT_EQ(router.WaitJournalRows(sent).size(), static_cast<size_t>(sent));
}

}  // namespace
}  // namespace narwhal::testing
