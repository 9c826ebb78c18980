// The KV-event subscriber against real narwhal-sim processes (SPEC §14,
// B26): the engine's prefix cache publishes what it stores and evicts over
// ZeroMQ, and the router's index must hold exactly what the engine holds.
// The oracle is the engine itself: a prompt of b blocks plus one token, sent
// again, reports cached_tokens = 16 x (blocks it still held). Also through
// the engine: a dropped batch replayed from its ROUTER, a replay it never
// answers (cold at the timeout on the injected clock), a restart (cold, and
// the engine indeed empty), both event encodings, and a consumer publishing
// the blocks it pulled from a producer.
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "nlohmann/json.hpp"
#include "router/fleet/kv_subscriber.h"
#include "tests/fakes/fake_clock.h"
#include "tests/fakes/sim_process.h"

namespace narwhal::router::kv {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;
using testing::SimProcess;

constexpr char kModel[] = "Qwen/Qwen3-0.6B";
constexpr int kBlockChars = 64;  // 16 tokens of 4 characters

// `blocks` full blocks of text distinct per `tag`, then one more token.
std::string PromptOf(const std::string& tag, int blocks) {
  std::string text;
  while (text.size() < static_cast<size_t>(blocks * kBlockChars)) text += tag + " says hi; ";
  text.resize(static_cast<size_t>(blocks * kBlockChars));
  return text + "end.";
}

bool WaitFor(const std::function<bool()>& done, std::chrono::milliseconds limit = 10s) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return done();
}

json Post(const SimProcess& sim, const std::string& path, const json& body) {
  httplib::Client client(sim.host(), sim.port());
  client.set_read_timeout(10, 0);
  auto res = client.Post(path, body.dump(), "application/json");
  if (!res || res->status != 200) {
    ADD_FAILURE() << path << ": " << (res ? res->body : httplib::to_string(res.error()));
    return json();
  }
  return json::parse(res->body);
}

json KvStats(const SimProcess& sim) {
  httplib::Client client(sim.host(), sim.port());
  auto res = client.Get("/sim/kv_events");
  if (!res || res->status != 200) {
    ADD_FAILURE() << "GET /sim/kv_events: " << (res ? res->body : httplib::to_string(res.error()));
    return json::object({{"next_seq", 0}, {"pending", 0}, {"replays", 0}});
  }
  return json::parse(res->body);
}

std::unique_ptr<SimProcess> StartSim(const std::string& id, std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"--engine-id",       id,        "--prefix-cache-blocks",   "8",
                                   "--kv-events-port",  "0",       "--kv-events-replay-port", "0",
                                   "--kv-events-topic", "kv@" + id};
  args.insert(args.end(), extra.begin(), extra.end());
  auto sim = SimProcess::Start(args);
  EXPECT_TRUE(sim.ok()) << sim.status();
  return sim.ok() ? *std::move(sim) : nullptr;
}

KvSource SourceOf(SimProcess& sim, bool replay = true) {
  const json info = sim.Info().value();
  return KvSource{
      sim.engine_id(), "tcp://127.0.0.1:" + std::to_string(info["kv_events_port"].get<int>()),
      replay ? "tcp://127.0.0.1:" + std::to_string(info["kv_events_replay_port"].get<int>()) : ""};
}

class KvEventsSimTest : public ::testing::Test {
 protected:
  KvEventsSimTest() : metrics_(registry_) {}

  // Computes `prompt` on the engine (a one-token completion); returns the
  // prompt tokens it found cached.
  int Complete(SimProcess& sim, const std::string& prompt) {
    const json r =
        Post(sim, "/v1/completions", {{"model", kModel}, {"prompt", prompt}, {"max_tokens", 1}});
    return r.is_object() ? r["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>() : -1;
  }
  std::vector<uint32_t> Tokens(SimProcess& sim, const std::string& prompt) {
    const json r = Post(sim, "/tokenize", {{"model", kModel}, {"prompt", prompt}});
    return r.is_object() ? r["tokens"].get<std::vector<uint32_t>>() : std::vector<uint32_t>{};
  }
  size_t Held(SimProcess& sim, const std::string& prompt) {
    return subscriber_.LeadingBlocks(sim.engine_id(), Tokens(sim, prompt));
  }
  KvSourceStatus Status(SimProcess& sim) {
    return subscriber_.Status(sim.engine_id()).value_or(KvSourceStatus{});
  }
  // Subscribes and computes warm-up prompts until a batch arrived (the SUB
  // misses what the engine publishes before its subscription reaches it).
  void Subscribe(std::vector<KvSource> sources) {
    subscriber_.SetSources(sources);
    for (const KvSource& s : sources) {
      SimProcess& sim = *sims_.at(s.iid);
      int n = 0;
      ASSERT_TRUE(WaitFor([&] {
        Complete(sim, PromptOf("warm-up " + std::to_string(n++), 1));
        return Status(sim).last_seq.has_value();
      }));
    }
  }
  // Waits until the subscriber applied every batch the engine published.
  void Synced(SimProcess& sim) {
    ASSERT_TRUE(WaitFor([&] {
      const json stats = KvStats(sim);
      const uint64_t next = stats["next_seq"].get<uint64_t>();
      return stats["pending"] == 0 && next > 0 && Status(sim).last_seq == next - 1;
    }));
  }
  // The engine's own account of `prompt`: blocks it held (computes it again).
  int EngineHeld(SimProcess& sim, const std::string& prompt) { return Complete(sim, prompt) / 16; }

  testing::FakeClock clock_;
  prometheus::Registry registry_;
  Metrics metrics_;
  KvSubscriber subscriber_{clock_,
                           KvSubscriberOptions{.topic = "kv@",
                                               .index = {.block_size = 16, .max_blocks = 100000},
                                               .replay_timeout = 2s,
                                               .rebuild = true,
                                               .max_held = 4096,
                                               .decode = {},
                                               .poll_interval = 5ms},
                           &metrics_};
  std::map<std::string, std::unique_ptr<SimProcess>> sims_;
};

class KvEventsSimEncodingTest : public KvEventsSimTest,
                                public ::testing::WithParamInterface<std::string> {};

TEST_P(KvEventsSimEncodingTest, TheIndexHoldsWhatTheEngineHoldsThroughEvictions) {
  sims_["p0"] = StartSim("p0", {"--kv-events-encoding", GetParam()});
  SimProcess& sim = *sims_["p0"];
  Subscribe({SourceOf(sim)});
  const std::string a = PromptOf("alpha", 5);
  const std::string b = PromptOf("bravo", 5);
  const std::string c = PromptOf("charlie", 5);

  EXPECT_EQ(Complete(sim, a), 0);
  ASSERT_TRUE(WaitFor([&] { return Held(sim, a) == 5; })) << Held(sim, a);
  // The cache holds 8 blocks: bravo evicts alpha's least recent blocks (its
  // tail), charlie the rest. After each, the index agrees with the engine.
  for (const std::string& next : {b, c}) {
    Complete(sim, next);
    ASSERT_TRUE(WaitFor([&] { return Held(sim, next) == 5; }));
    Synced(sim);  // the evictions too
    const size_t indexed = Held(sim, a);
    EXPECT_LT(indexed, 5u) << "evictions reached the index";
    EXPECT_EQ(static_cast<int>(indexed), EngineHeld(sim, a)) << "after " << next.substr(0, 7);
    // Computing alpha again stored it again: the index follows.
    ASSERT_TRUE(WaitFor([&] { return Held(sim, a) == 5; })) << Held(sim, a);
  }
  EXPECT_EQ(Status(sim).colds, 0);
  EXPECT_EQ(Status(sim).gaps, 0);
}

INSTANTIATE_TEST_SUITE_P(Encodings, KvEventsSimEncodingTest, ::testing::Values("map", "array"));

TEST_F(KvEventsSimTest, ADroppedBatchIsReplayedFromTheEngine) {
  sims_["p0"] = StartSim("p0");
  SimProcess& sim = *sims_["p0"];
  Subscribe({SourceOf(sim)});
  // The stream under way first (a dropped first batch would be the start of
  // a stream, rebuilt rather than a gap).
  const std::string w = PromptOf("whiskey", 1);
  Complete(sim, w);
  ASSERT_TRUE(WaitFor([&] { return Held(sim, w) == 1 && !Status(sim).replaying; }));
  // Subscribing may have rebuilt the stream's start from the engine's buffer.
  const long long replays_before = KvStats(sim)["replays"].get<long long>();
  const long long gaps_before = Status(sim).gaps;
  Post(sim, "/sim/kv_events", {{"drop_next", 1}});
  const std::string d = PromptOf("delta", 3);
  const std::string e = PromptOf("echo", 2);
  Complete(sim, d);  // its batch is numbered, never sent
  ASSERT_TRUE(WaitFor([&] { return KvStats(sim)["dropped"] == 1; }));
  Complete(sim, e);  // the next one shows the gap
  ASSERT_TRUE(WaitFor([&] { return Held(sim, d) == 3 && Held(sim, e) == 2; }))
      << Held(sim, d) << " " << Held(sim, e);
  const KvSourceStatus s = Status(sim);
  EXPECT_EQ(s.gaps - gaps_before, 1);
  EXPECT_EQ(s.colds, 0);
  EXPECT_EQ(KvStats(sim)["replays"].get<long long>() - replays_before, 1);
}

TEST_F(KvEventsSimTest, AReplayTheEngineNeverAnswersMakesItCold) {
  sims_["p0"] = StartSim("p0");
  SimProcess& sim = *sims_["p0"];
  Subscribe({SourceOf(sim)});
  const std::string a = PromptOf("alpha", 3);
  Complete(sim, a);
  ASSERT_TRUE(WaitFor([&] { return Held(sim, a) == 3; }));
  Post(sim, "/sim/kv_events", {{"drop_next", 1}, {"stall_replay", true}});
  Complete(sim, PromptOf("delta", 1));
  ASSERT_TRUE(WaitFor([&] { return KvStats(sim)["dropped"] == 1; }));
  Complete(sim, PromptOf("echo", 1));
  ASSERT_TRUE(WaitFor([&] { return Status(sim).replaying; }));
  EXPECT_EQ(Held(sim, a), 3u) << "warm until the timeout";
  clock_.Advance(2.0);
  ASSERT_TRUE(WaitFor([&] { return Status(sim).colds == 1; }));
  // Cold: nothing claimed, though the engine still holds alpha (an
  // under-estimate, never the reverse).
  EXPECT_EQ(Held(sim, a), 0u);
  EXPECT_EQ(EngineHeld(sim, a), 3);
  // Fresh events warm it again: computing alpha again stores nothing new
  // (the engine had it), so a new prompt shows the stream is live.
  const std::string f = PromptOf("foxtrot", 2);
  Complete(sim, f);
  ASSERT_TRUE(WaitFor([&] { return Held(sim, f) == 2; }));
}

TEST_F(KvEventsSimTest, ARestartedEngineIsColdAndItsCacheIsIndeedEmpty) {
  sims_["p0"] = StartSim("p0");
  SimProcess& sim = *sims_["p0"];
  Subscribe({SourceOf(sim)});
  const std::string a = PromptOf("alpha", 4);
  Complete(sim, a);
  ASSERT_TRUE(WaitFor([&] { return Held(sim, a) == 4; }));
  Post(sim, "/sim/kv_events", {{"restart", true}});
  const std::string g = PromptOf("golf", 2);
  Complete(sim, g);  // numbered 0 again
  ASSERT_TRUE(WaitFor([&] { return Held(sim, g) == 2; }));
  EXPECT_EQ(Status(sim).colds, 1);
  EXPECT_EQ(Held(sim, a), 0u);
  EXPECT_EQ(EngineHeld(sim, a), 0) << "the index was right to forget";
}

TEST_F(KvEventsSimTest, AConsumerPublishesTheBlocksItPulled) {
  sims_["p0"] = StartSim("p0", {"--role", "prefill"});
  sims_["d0"] = StartSim("d0", {"--role", "decode"});
  SimProcess& p0 = *sims_["p0"];
  SimProcess& d0 = *sims_["d0"];
  Subscribe({SourceOf(p0), SourceOf(d0)});
  const std::string h = PromptOf("hotel", 3);
  const json prefill = Post(p0, "/v1/completions",
                            {{"model", kModel},
                             {"prompt", h},
                             {"max_tokens", 1},
                             {"kv_transfer_params", {{"do_remote_decode", true}}}});
  ASSERT_TRUE(prefill.contains("kv_transfer_params")) << prefill.dump();
  ASSERT_TRUE(WaitFor([&] { return Held(p0, h) == 3; }));
  EXPECT_EQ(Held(d0, h), 0u);
  Post(d0, "/v1/completions",
       {{"model", kModel},
        {"prompt", h},
        {"max_tokens", 2},
        {"kv_transfer_params", prefill["kv_transfer_params"]}});
  ASSERT_TRUE(WaitFor([&] { return Held(d0, h) == 3; })) << Held(d0, h);
}

}  // namespace
}  // namespace narwhal::router::kv
