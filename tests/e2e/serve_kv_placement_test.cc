// Placement from the engines' KV events end to end (SPEC §14, B27/B28):
// narwhal-serve over narwhal-sim engines that publish their caches and
// tokenize with their own tokenizer (4 characters a token, 16 tokens a
// block). The prefill follows the blocks a producer really holds — and
// stops following them once the engine evicted them; a tokenize outage
// places least-loaded without failing a request; with disaggregate auto a
// request skips the prefill leg exactly when its decode engine holds all but
// fewer than min_uncached_tokens of its prompt, and the engine's own count
// of cached tokens agrees with the router's estimate.
#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "narwhal/v1/inference.grpc.pb.h"
#include "nlohmann/json.hpp"
#include "tests/e2e/e2e_util.h"

namespace narwhal::testing {
namespace {

// `tokens` tokens of text (4 characters each) for `tag`.
std::string PlaceTail(const std::string& tag, int tokens) {
  std::string text;
  while (text.size() < static_cast<size_t>(tokens * 4)) text += "[" + tag + "]";
  text.resize(static_cast<size_t>(tokens * 4));
  return text;
}

long long PlaceSimBlocks(SimProcess& sim) {
  return json::parse(HttpGet(sim.port(), "/sim/prefix_cache").body)["blocks"].get<long long>();
}

// Engines with KV events and a router over them.
class KvPlacementFleet {
 public:
  // `engines`: iid -> role. Each sim keeps `cache_blocks` blocks.
  void Start(const std::vector<std::pair<std::string, std::string>>& engines, const json& overrides,
             int cache_blocks = 256) {
    std::vector<std::tuple<std::string, std::string, std::string>> fleet;
    std::map<std::string, json> endpoints;
    for (const auto& [iid, role] : engines) {
      auto sim = SimProcess::Start({"--engine-id", iid, "--role", role, "--token-interval-ms", "1",
                                    "--prefix-cache-blocks", std::to_string(cache_blocks),
                                    "--kv-events-port", "0", "--kv-events-replay-port", "0"});
      ASSERT_TRUE(sim.ok()) << sim.status();
      const json info = (*sim)->Info().value();
      endpoints[iid] = {
          {"kv_events", "tcp://127.0.0.1:" + std::to_string(info["kv_events_port"].get<int>())},
          {"kv_events_replay",
           "tcp://127.0.0.1:" + std::to_string(info["kv_events_replay_port"].get<int>())}};
      fleet.emplace_back(iid, (*sim)->url(), role);
      iids_.push_back(iid);
      sims_[iid] = std::move(*sim);
    }
    json base = {{"membership", {{"config_poll_s", 0}}}};
    base.merge_patch(overrides);
    json config = FleetConfig(fleet, base);
    for (json& e : config["engines"]) e.update(endpoints[e["iid"].get<std::string>()]);
    ServeOptions options;
    options.config = config;
    auto started = ServeProcess::Start(std::move(options));
    ASSERT_TRUE(started.ok()) << started.status();
    router_ = std::move(*started);
  }

  // Until every subscription is live, requests warm them up; then every
  // engine's cache is emptied (AllBlocksCleared) and the indexes are empty.
  void WarmUpAndClear() {
    int k = 0;
    ASSERT_TRUE(WaitUntil(
        [&] {
          Post(SimBlocksText("warm-up " + std::to_string(k++), 4) + "end.");
          for (const std::string& iid : iids_) {
            if (ScrapedMetric(*router_, "narwhal_kv_events_total",
                              {{"iid", iid}, {"kind", "stored"}}) == 0) {
              return false;
            }
          }
          return true;
        },
        absl::Seconds(15)))
        << router_->StderrTail();
    for (const std::string& iid : iids_) {
      httplib::Client client("127.0.0.1", sims_[iid]->port());
      ASSERT_TRUE(client.Delete("/sim/prefix_cache"));
      ASSERT_TRUE(WaitUntil(
          [&] {
            return ScrapedMetric(*router_, "narwhal_kv_index_blocks", {{"iid", iid}}) == 0;
          },
          absl::Seconds(15)))
          << iid;
      ASSERT_TRUE(sims_[iid]->ClearRequests().ok());
    }
  }

  // Waits until the router's index of `iid` holds what the engine holds.
  bool IndexCaughtUp(const std::string& iid) {
    return WaitUntil(
        [&] {
          return ScrapedMetric(*router_, "narwhal_kv_index_blocks", {{"iid", iid}}) ==
                 static_cast<double>(PlaceSimBlocks(*sims_[iid]));
        },
        absl::Seconds(15));
  }

  // A completions request through the router (200 expected); its journal row.
  json Post(const std::string& prompt, int max_tokens = 2) {
    const HttpResult r = HttpPostRaw(router_->http_port(), kCompletions,
                                     Completion(prompt, max_tokens, false).dump());
    EXPECT_EQ(r.status, 200) << r.body;
    last_body_ = json::parse(r.body, nullptr, false);
    ++sent_;
    absl::StatusOr<json> row = router_->WaitJournalRow(r.header("x-request-id"));
    EXPECT_TRUE(row.ok()) << row.status();
    return row.ok() ? *row : json::object();
  }

  // The same through the gRPC door: its journal row (the call must end OK).
  json Generate(const std::string& prompt) {
    auto stub = narwhal::v1::Inference::NewStub(
        grpc::CreateChannel(router_->grpc_target(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    narwhal::v1::GenerateRequest request;
    request.set_model(kModel);
    request.set_prompt(prompt);
    request.set_max_tokens(2);
    auto reader = stub->Generate(&context, request);
    narwhal::v1::GenerateResponse response;
    while (reader->Read(&response)) {
    }
    const grpc::Status status = reader->Finish();
    EXPECT_TRUE(status.ok()) << status.error_message();
    ++sent_;
    std::string rid;
    const auto& md = context.GetServerInitialMetadata();
    if (auto it = md.find("x-request-id"); it != md.end())
      rid.assign(it->second.data(), it->second.size());
    absl::StatusOr<json> row = router_->WaitJournalRow(rid);
    EXPECT_TRUE(row.ok()) << row.status();
    return row.ok() ? *row : json::object();
  }

  ServeProcess& router() { return *router_; }
  SimProcess& sim(const std::string& iid) { return *sims_[iid]; }
  int sent() const { return sent_; }
  // The last response Post() received.
  const json& last_body() const { return last_body_; }

 private:
  std::vector<std::string> iids_;
  std::map<std::string, std::unique_ptr<SimProcess>> sims_;
  std::unique_ptr<ServeProcess> router_;
  int sent_ = 0;
  json last_body_;
};

TEST(ServeKvPlacementTest, B27_ThePrefillFollowsTheBlocksAProducerReallyHolds) {
  KvPlacementFleet fleet;
  // Two producers that keep 16 blocks each, one consumer.
  ASSERT_NO_FATAL_FAILURE(fleet.Start({{"p0", "prefill"}, {"p1", "prefill"}, {"d0", "decode"}},
                                      {{"placement", {{"prefill", "kv_events"}}}}, 16));
  ASSERT_NO_FATAL_FAILURE(fleet.WarmUpAndClear());

  const std::string question = SimBlocksText("the question", 8) + "end.";  // 129 tokens
  const json first = fleet.Post(question);
  EXPECT_EQ(first["prefill_placement"], "least_loaded") << first.dump();  // no engine holds it
  EXPECT_EQ(first["cached_tokens_est"], 0) << first.dump();
  const std::string holder = first["prefill_iid"].get<std::string>();
  ASSERT_TRUE(fleet.IndexCaughtUp(holder));
  ASSERT_EQ(PlaceSimBlocks(fleet.sim(holder)), 8);

  // The same prompt again, three times: the producer holding its 8 blocks
  // takes it each time, though the other one is equally idle.
  for (int k = 0; k < 3; ++k) {
    const json again = fleet.Post(question);
    EXPECT_EQ(again["prefill_placement"], "prefix_match") << again.dump();
    EXPECT_EQ(again["prefill_iid"], holder) << again.dump();
    EXPECT_EQ(again["cached_tokens_est"], 128) << again.dump();
  }

  // The gRPC door's requests are tokenized and placed the same way.
  const json over_grpc = fleet.Generate(question);
  EXPECT_EQ(over_grpc["door"], "grpc") << over_grpc.dump();
  EXPECT_EQ(over_grpc["prefill_placement"], "prefix_match") << over_grpc.dump();
  EXPECT_EQ(over_grpc["prefill_iid"], holder) << over_grpc.dump();
  EXPECT_EQ(over_grpc["cached_tokens_est"], 128) << over_grpc.dump();

  // The holder evicts those blocks (16 blocks of other prompts sent to it
  // directly, as another router would): BlockRemoved follows, and the
  // router no longer sends the question there for its cache. A text index
  // of the router's own placements would still say it does.
  const json direct = {
      {"model", kModel},
      {"prompt", SimBlocksText("someone else's", 16) + "end."},
      {"max_tokens", 1},
      {"kv_transfer_params", {{"do_remote_decode", true}, {"do_remote_prefill", false}}}};
  const HttpResult evicting = HttpPostRaw(fleet.sim(holder).port(), kCompletions, direct.dump());
  ASSERT_EQ(evicting.status, 200) << evicting.body;
  ASSERT_TRUE(fleet.IndexCaughtUp(holder));
  EXPECT_GT(ScrapedMetric(fleet.router(), "narwhal_kv_events_total",
                          {{"iid", holder}, {"kind", "removed"}}),
            0);
  const json after = fleet.Post(question);
  EXPECT_EQ(after["prefill_placement"], "least_loaded") << after.dump();
  EXPECT_EQ(after["cached_tokens_est"], 0) << after.dump();

  // The engine placed on computes the prompt, so it holds it now and the
  // next one goes there.
  const std::string new_holder = after["prefill_iid"].get<std::string>();
  ASSERT_TRUE(fleet.IndexCaughtUp(new_holder));
  const json last = fleet.Post(question);
  EXPECT_EQ(last["prefill_placement"], "prefix_match") << last.dump();
  EXPECT_EQ(last["prefill_iid"], new_holder) << last.dump();
  EXPECT_EQ(ScrapedMetric(fleet.router(), "narwhal_kv_tokenize_failures_total", {}), 0);
}

// A listening socket that accepts and never answers.
class SilentListener {
 public:
  SilentListener() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    ::listen(fd_, 64);
    socklen_t len = sizeof(addr);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
  }
  ~SilentListener() { ::close(fd_); }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

TEST(ServeKvPlacementTest, B27_ATokenizeOutagePlacesLeastLoadedAndFailsNoRequest) {
  // The tokenizer is a tokenize-only instance that accepts connections and
  // never answers: every request waits tokenize_timeout_s, then is placed
  // least-loaded, journaled with the reason, and answered.
  SilentListener silent;
  KvPlacementFleet fleet;
  ASSERT_NO_FATAL_FAILURE(
      fleet.Start({{"p0", "prefill"}, {"d0", "decode"}},
                  {{"placement", {{"prefill", "kv_events"}, {"disaggregate", "auto"}}},
                   {"kv_events",
                    {{"tokenizer", "http://127.0.0.1:" + std::to_string(silent.port())},
                     {"tokenize_timeout_s", 0.2}}}}));
  for (int k = 0; k < 3; ++k) {
    const json row = fleet.Post(SimBlocksText("outage " + std::to_string(k), 4) + "end.");
    EXPECT_EQ(row["terminal"], "completed") << row.dump();
    EXPECT_EQ(row["prefill_placement"], "least_loaded") << row.dump();
    EXPECT_EQ(row["disaggregated"], true) << row.dump();
    EXPECT_EQ(row["cached_tokens_est"], nullptr) << row.dump();
    EXPECT_TRUE(row.value("placement_fallback", "").starts_with("timeout: ")) << row.dump();
  }
  EXPECT_EQ(
      ScrapedMetric(fleet.router(), "narwhal_kv_tokenize_failures_total", {{"reason", "timeout"}}),
      3);
}

TEST(ServeKvPlacementTest, B27_AnUnreachableTokenizerIsAnErrorFallback) {
  int port = 0;
  {
    SilentListener gone;  // its port, then closed: nothing listens there
    port = gone.port();
  }
  KvPlacementFleet fleet;
  ASSERT_NO_FATAL_FAILURE(
      fleet.Start({{"p0", "prefill"}, {"d0", "decode"}},
                  {{"placement", {{"prefill", "kv_events"}}},
                   {"kv_events", {{"tokenizer", "http://127.0.0.1:" + std::to_string(port)}}}}));
  const json row = fleet.Post(SimBlocksText("unreachable", 2) + "end.");
  EXPECT_EQ(row["terminal"], "completed") << row.dump();
  EXPECT_TRUE(row.value("placement_fallback", "").starts_with("error: ")) << row.dump();
  EXPECT_EQ(
      ScrapedMetric(fleet.router(), "narwhal_kv_tokenize_failures_total", {{"reason", "error"}}),
      1);
}

TEST(ServeKvPlacementTest, B28_AutoSkipsThePrefillExactlyWhenTheDecodeEngineHoldsEnough) {
  KvPlacementFleet fleet;
  ASSERT_NO_FATAL_FAILURE(fleet.Start(
      {{"p0", "prefill"}, {"d0", "decode"}},
      {{"placement",
        {{"prefill", "kv_events"}, {"disaggregate", "auto"}, {"min_uncached_tokens", 32}}}}));
  ASSERT_NO_FATAL_FAILURE(fleet.WarmUpAndClear());
  const std::string history = SimBlocksText("the conversation so far", 8);  // 128 tokens

  // Turn 1: the decode engine holds nothing: disaggregated, and d0 caches
  // (and publishes) the blocks it pulled.
  const json turn1 = fleet.Post(history + "end.");
  EXPECT_EQ(turn1["disaggregated"], true) << turn1.dump();
  EXPECT_EQ(turn1["prefill_iid"], "p0") << turn1.dump();
  ASSERT_TRUE(fleet.IndexCaughtUp("d0"));
  ASSERT_EQ(PlaceSimBlocks(fleet.sim("d0")), 8);

  // Turn 2: 31 tokens d0 does not hold (< 32): d0 computes them itself. No
  // prefill reaches p0; d0's request carries no kv_transfer_params; the
  // engine's own count of cached tokens is the router's estimate.
  ASSERT_TRUE(fleet.sim("p0").ClearRequests().ok());
  ASSERT_TRUE(fleet.sim("d0").ClearRequests().ok());
  const json turn2 = fleet.Post(history + PlaceTail("a", 31));
  EXPECT_EQ(turn2["disaggregated"], false) << turn2.dump();
  EXPECT_EQ(turn2["prefill_placement"], "local_prefill") << turn2.dump();
  EXPECT_EQ(turn2["prefill_iid"], "d0") << turn2.dump();
  EXPECT_EQ(turn2["decode_iid"], "d0") << turn2.dump();
  EXPECT_EQ(turn2["cached_tokens_est"], 128) << turn2.dump();
  EXPECT_EQ(fleet.last_body()["usage"]["prompt_tokens_details"]["cached_tokens"], 128)
      << fleet.last_body().dump();
  EXPECT_EQ(turn2["handoff_abandoned"], nullptr) << turn2.dump();
  EXPECT_TRUE(SimRequests(fleet.sim("p0")).empty());
  const std::vector<json> local = SimRequests(fleet.sim("d0"));
  ASSERT_EQ(local.size(), 1u);
  EXPECT_FALSE(local[0]["body"].contains("kv_transfer_params")) << local[0].dump();

  // Turn 2': 32 tokens d0 does not hold (= min_uncached_tokens): a prefill
  // leg on p0 again.
  const json turn3 = fleet.Post(history + PlaceTail("b", 32));
  EXPECT_EQ(turn3["disaggregated"], true) << turn3.dump();
  EXPECT_EQ(turn3["prefill_iid"], "p0") << turn3.dump();
  EXPECT_EQ(turn3["cached_tokens_est"], 128) << turn3.dump();  // p0 computed turn 1

  EXPECT_EQ(ScrapedMetric(fleet.router(), "narwhal_placement_decisions_total",
                          {{"phase", "prefill"}, {"reason", "local_prefill"}}),
            1);
  EXPECT_EQ(fleet.router().WaitJournalRows(fleet.sent()).size(), static_cast<size_t>(fleet.sent()));
}

}  // namespace
}  // namespace narwhal::testing
