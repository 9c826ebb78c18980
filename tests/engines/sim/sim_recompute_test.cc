// The consumer-side `recompute` fault of a real narwhal-sim pair: the
// consumer does not pull the handoff, computes the prompt itself (its
// prefill time), reports usage cached_tokens 0 and counts a failed transfer
// in vllm:nixl_num_failed_transfers_total; the producer keeps the blocks
// until its lease ends. A normal crossed decode reports the pulled tokens.
#include <httplib.h>

#include <functional>
#include <memory>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/engines/sim/sim_test_util.h"

namespace narwhal::testing {
namespace {

using nlohmann::json;

std::unique_ptr<SimProcess> StartRecomputeSim(std::vector<std::string> args) {
  auto sim = SimProcess::Start(std::move(args));
  EXPECT_TRUE(sim.ok()) << sim.status();
  return sim.ok() ? *std::move(sim) : nullptr;
}

// The value of the first sample named `name` in the engine's /metrics, or -1.
double MetricValue(const SimProcess& sim, const std::string& name) {
  httplib::Client client(sim.host(), sim.port());
  httplib::Result result = client.Get("/metrics");
  if (!result || result->status != 200) return -1;
  for (absl::string_view line : absl::StrSplit(result->body, '\n')) {
    if (line.rfind(name, 0) != 0 || line.size() <= name.size() ||
        (line[name.size()] != '{' && line[name.size()] != ' ')) {
      continue;
    }
    double value = -1;
    const size_t space = line.rfind(' ');
    if (absl::SimpleAtod(line.substr(space + 1), &value)) return value;
  }
  return -1;
}

bool WaitUntilTrue(const std::function<bool()>& done, absl::Duration timeout) {
  const absl::Time end = absl::Now() + timeout;
  while (!done()) {
    if (absl::Now() > end) return false;
    absl::SleepFor(absl::Milliseconds(50));
  }
  return true;
}

struct Decoded {
  json usage;
  absl::Duration took;
};

// One handoff from `producer`, decoded (non-streaming) by `consumer`.
Decoded Handoff(SimProcess& producer, SimProcess& consumer, const std::string& prompt,
                const std::string& id) {
  const json body = CompletionBody(prompt, 4, false);
  const JsonReply pre =
      PostJson(producer, "/v1/completions", PrefillBody(body), {{"X-Request-Id", id}});
  EXPECT_EQ(pre.status, 200) << pre.body;
  json decode = body;
  decode["kv_transfer_params"] = pre.json["kv_transfer_params"];
  const absl::Time start = absl::Now();
  const JsonReply reply = PostJson(consumer, "/v1/completions", decode, {{"X-Request-Id", id}});
  Decoded out{json(), absl::Now() - start};
  EXPECT_EQ(reply.status, 200) << reply.body;
  out.usage = reply.json.value("usage", json());
  return out;
}

TEST(SimRecomputeTest, RecomputeFaultIgnoresTheHandoffAndCountsAFailedTransfer) {
  auto producer = StartRecomputeSim({"--engine-id", "p0", "--role", "prefill", "--kv-lease-s", "1"});
  // 2000 ms per 1000 prompt tokens: a 400-token prompt takes 800 ms here.
  auto consumer =
      StartRecomputeSim({"--engine-id", "d0", "--role", "decode", "--enable-prompt-tokens-details",
                "--prefill-ms-per-1k-tokens", "2000"});
  ASSERT_NE(producer, nullptr);
  ASSERT_NE(consumer, nullptr);
  const std::string prompt(1600, 'w');  // 400 tokens
  EXPECT_EQ(MetricValue(*consumer, "vllm:nixl_num_failed_transfers_total"), 0);

  // A normal crossed decode pulls: every prompt token but the last cached.
  const Decoded pulled = Handoff(*producer, *consumer, prompt, "pulled");
  EXPECT_EQ(pulled.usage["prompt_tokens"], 400);
  EXPECT_EQ(pulled.usage["prompt_tokens_details"]["cached_tokens"], 399);
  EXPECT_LT(pulled.took, absl::Milliseconds(700));
  absl::StatusOr<json> kv = producer->Kv();
  ASSERT_TRUE(kv.ok());
  EXPECT_EQ((*kv)["consumed"].size(), 1u);

  ASSERT_TRUE(
      consumer->SetFaults(json{{"faults", {{{"kind", "recompute"}, {"remote_engine_id", "p0"}}}}})
          .ok());
  const Decoded recomputed = Handoff(*producer, *consumer, prompt, "recomputed");
  EXPECT_EQ(recomputed.usage["prompt_tokens"], 400);
  EXPECT_EQ(recomputed.usage["prompt_tokens_details"]["cached_tokens"], 0);
  EXPECT_GE(recomputed.took, absl::Milliseconds(800));  // the prefill time
  EXPECT_EQ(MetricValue(*consumer, "vllm:nixl_num_failed_transfers_total"), 1);

  // Nothing was pulled: the producer holds the blocks until the lease ends.
  kv = producer->Kv();
  ASSERT_TRUE(kv.ok());
  EXPECT_EQ((*kv)["held"].size(), 1u);
  EXPECT_EQ((*kv)["consumed"].size(), 1u);
  ASSERT_TRUE(WaitUntilTrue(
      [&] { return MetricValue(*producer, "vllm:nixl_num_kv_expired_reqs_total") == 1; },
      absl::Seconds(5)));

  // The rule fired once; the next decode pulls again.
  const Decoded again = Handoff(*producer, *consumer, prompt, "again");
  EXPECT_EQ(again.usage["prompt_tokens_details"]["cached_tokens"], 399);
  EXPECT_EQ(MetricValue(*consumer, "vllm:nixl_num_failed_transfers_total"), 1);
}

TEST(SimRecomputeTest, WithoutPromptTokensDetailsUsageHasNoCachedTokens) {
  auto producer = StartRecomputeSim({"--engine-id", "p0", "--role", "prefill"});
  auto consumer = StartRecomputeSim({"--engine-id", "d0", "--role", "decode"});
  ASSERT_NE(producer, nullptr);
  ASSERT_NE(consumer, nullptr);
  const Decoded pulled = Handoff(*producer, *consumer, "hello there", "plain");
  EXPECT_FALSE(pulled.usage.contains("prompt_tokens_details") &&
               pulled.usage["prompt_tokens_details"].is_object())
      << pulled.usage;
}

}  // namespace
}  // namespace narwhal::testing
