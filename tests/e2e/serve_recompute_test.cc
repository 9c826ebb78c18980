// Silent-recompute detection end to end (README "KV handoff integrity"):
// narwhal-serve in front of narwhal-sim engines that report
// prompt_tokens_details, where consumer d0 ignores every handoff from p0 (a
// `recompute` fault rule) and computes the prompt itself. Every answer is
// correct; through the HTTP door and the gRPC door the recomputes are
// counted in narwhal_kv_recompute_suspected_total, journaled and logged,
// and the link p0->d0 is held (ListLinks, narwhal_link_held). A streaming
// client that asks for no usage is caught by d0's failed-transfer counter.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "narwhal/admin/v1/admin.grpc.pb.h"
#include "narwhal/v1/inference.grpc.pb.h"
#include "tests/e2e/e2e_util.h"

namespace narwhal::testing {
namespace {

namespace pb = narwhal::admin::v1;

class ServeRecomputeTest : public E2eTest {
 protected:
  static void SetUpTestSuite() {
    for (const auto& [iid, role] :
         std::vector<std::pair<std::string, std::string>>{{"p0", "prefill"},
                                                          {"p1", "prefill"},
                                                          {"d0", "decode"},
                                                          {"d1", "decode"},
                                                          {"d2", "decode"}}) {
      auto sim = SimProcess::Start({"--engine-id", iid, "--role", role, "--model", kModel,
                                    "--token-interval-ms", "2", "--threads", "64",
                                    "--enable-prompt-tokens-details"});
      ASSERT_TRUE(sim.ok()) << sim.status();
      engines_[iid] = std::move(*sim);
    }
  }
  static void TearDownTestSuite() { engines_.clear(); }

  void SetUp() override {
    E2eTest::SetUp();
    for (auto& [iid, sim] : engines_) {
      ASSERT_TRUE(sim->ClearFaults().ok());
      ASSERT_TRUE(sim->ClearRequests().ok());
    }
    // d0 ignores every handoff from p0 and computes the prompt itself.
    ASSERT_TRUE(engines_["d0"]
                    ->SetFaults(json{{"faults",
                                      {{{"kind", "recompute"},
                                        {"phase", "decode"},
                                        {"remote_engine_id", "p0"},
                                        {"times", -1}}}}})
                    .ok());
  }

  // The links e2e test's set-up: least-loaded placement rotates sequential
  // requests over every pair (prefill p0/p1, decode d0/d1/d2: p0->d0 is
  // every 6th request); releases off so no release leg steers placement.
  ServeProcess& Start() {
    std::vector<std::tuple<std::string, std::string, std::string>> fleet;
    for (const auto& [iid, sim] : engines_) {
      fleet.emplace_back(iid, sim->url(), iid[0] == 'p' ? "prefill" : "decode");
    }
    return StartRouterWith(fleet, {{"recovery", {{"eject_after", 3}, {"readmit_interval_s", 0.3}}},
                                   {"placement", {{"prefill", "least_loaded"}}},
                                   {"handoff", {{"release", "off"}}},
                                   {"links", {{"hold_after", 3}, {"window_s", 60}}}});
  }

  double Suspected(ServeProcess& router, const std::string& iid) {
    return MetricSum(Metrics(router), "narwhal_kv_recompute_suspected_total", {{"iid", iid}});
  }
  double LinkHeld(ServeProcess& router, const std::string& producer, const std::string& consumer) {
    return MetricSum(Metrics(router), "narwhal_link_held",
                     {{"producer", producer}, {"consumer", consumer}});
  }
  static std::map<std::string, pb::Link> LinksByName(ServeProcess& router) {
    auto stub = pb::Admin::NewStub(
        grpc::CreateChannel(router.admin_address(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    pb::ListLinksResponse response;
    const grpc::Status s = stub->ListLinks(&context, pb::ListLinksRequest(), &response);
    EXPECT_TRUE(s.ok()) << s.error_message();
    std::map<std::string, pb::Link> out;
    for (const pb::Link& l : response.links()) out[l.producer() + "->" + l.consumer()] = l;
    return out;
  }

  // What both doors must show after the 13 requests (3 over p0->d0).
  void ExpectCountedAndHeld(ServeProcess& router, const std::vector<json>& rows) {
    ASSERT_TRUE(WaitUntil([&] { return LinkHeld(router, "p0", "d0") == 1; }, absl::Seconds(5)));
    EXPECT_EQ(Suspected(router, "d0"), 3);
    EXPECT_EQ(Suspected(router, "d1"), 0);
    EXPECT_EQ(Suspected(router, "d2"), 0);
    std::map<std::string, pb::Link> links = LinksByName(router);
    const pb::Link& held = links["p0->d0"];
    EXPECT_EQ(held.state(), "held");
    EXPECT_EQ(held.failures(), 3);
    EXPECT_NE(held.last_failure().find("kv_recompute"), std::string::npos) << held.last_failure();
    for (const auto& [name, l] : links) {
      if (name != "p0->d0") {
        EXPECT_EQ(l.state(), "serving") << name;
      }
    }
    // Neither engine left placement.
    const std::vector<MetricSample> m = Metrics(router);
    for (const std::string iid : {"p0", "p1", "d0", "d1", "d2"}) {
      EXPECT_EQ(MetricSum(m, "narwhal_engine_in_placement", {{"iid", iid}}), 1) << iid;
    }
    // Journal: the three rows over p0->d0 carry the evidence, no other does.
    int suspected = 0;
    for (const json& row : rows) {
      EXPECT_EQ(row["terminal"], "completed") << row.dump();
      const bool over_link = row["prefill_iid"] == "p0" && row["decode_iid"] == "d0";
      EXPECT_EQ(row["kv_recompute_suspected"], over_link) << row.dump();
      if (!over_link) continue;
      ++suspected;
      const json& e = row["kv_recompute_evidence"];
      EXPECT_EQ(e["source"], "usage");
      EXPECT_EQ(e["cached_tokens"], 0);
      EXPECT_GT(e["prompt_tokens"].get<int>(), 1);
    }
    EXPECT_EQ(suspected, 3);
    EXPECT_NE(
        router.StderrTail(20000).find("consumer d0 recomputed the prompt of a handoff from p0"),
        std::string::npos);
    // The link probe sees the recompute too: the link stays held.
    absl::SleepFor(absl::Seconds(1));
    EXPECT_EQ(LinkHeld(router, "p0", "d0"), 1);
    EXPECT_NE(LinksByName(router)["p0->d0"].cause().find("consecutive failed decodes"),
              std::string::npos);
  }

  static std::map<std::string, std::unique_ptr<SimProcess>> engines_;
};

std::map<std::string, std::unique_ptr<SimProcess>> ServeRecomputeTest::engines_;

TEST_F(ServeRecomputeTest, AConsumerThatRecomputesIsCountedAndItsLinkHeldOverHttp) {
  ServeProcess& router = Start();
  for (const std::string iid : {"d0", "d1", "d2"}) EXPECT_EQ(Suspected(router, iid), 0) << iid;
  std::vector<json> rows;
  for (int k = 0; k < 13; ++k) {
    const std::string prompt = "recompute " + std::to_string(k) + " tell me about narwhals";
    const HttpCapture c = Send(router, kCompletions, Completion(prompt, 3, false));
    EXPECT_EQ(c.status, 200) << Describe(c);  // recomputed, not failed
    rows.push_back(JournalRow(router, c));
  }
  ExpectCountedAndHeld(router, rows);
}

TEST_F(ServeRecomputeTest, AConsumerThatRecomputesIsCountedAndItsLinkHeldOverGrpc) {
  ServeProcess& router = Start();
  auto stub = narwhal::v1::Inference::NewStub(
      grpc::CreateChannel(router.grpc_target(), grpc::InsecureChannelCredentials()));
  std::vector<json> rows;
  for (int k = 0; k < 13; ++k) {
    narwhal::v1::GenerateRequest req;
    req.set_model(kModel);
    req.set_prompt("recompute grpc " + std::to_string(k) + " tell me about narwhals");
    req.set_max_tokens(3);
    CountRequest(router);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    auto reader = stub->Generate(&context, req);
    narwhal::v1::GenerateResponse response;
    std::string rid;
    while (reader->Read(&response)) {
      if (response.has_final()) rid = response.final().request_id();
    }
    const grpc::Status status = reader->Finish();
    EXPECT_TRUE(status.ok()) << status.error_message();  // recomputed, not failed
    rows.push_back(JournalRowFor(router, rid));
  }
  ExpectCountedAndHeld(router, rows);
}

TEST_F(ServeRecomputeTest, AStreamWithoutUsageIsCaughtByTheConsumersFailedTransferCounter) {
  ServeProcess& router = Start();
  // The first read of d0's counter is the baseline: wait for it.
  ASSERT_TRUE(WaitUntil(
      [&] {
        absl::StatusOr<json> records = engines_["d0"]->Requests();
        if (!records.ok() || !records->is_array()) return false;
        for (const json& r : *records) {
          if (r.value("path", "") == "/metrics" && !r.value("end", json()).is_null()) return true;
        }
        return false;
      },
      absl::Seconds(5)));
  absl::SleepFor(absl::Milliseconds(100));  // its answer reached the router
  // Six streaming requests that ask for no usage: one goes over p0->d0.
  for (int k = 0; k < 6; ++k) {
    const HttpCapture c =
        Send(router, kCompletions, Completion("quiet " + std::to_string(k) + " narwhals", 3, true));
    EXPECT_EQ(c.status, 200) << Describe(c);
  }
  // d0's /metrics is scraped every second; the increase is counted once.
  ASSERT_TRUE(WaitUntil([&] { return Suspected(router, "d0") == 1; }, absl::Seconds(5)));
  absl::SleepFor(absl::Seconds(1.5));
  EXPECT_EQ(Suspected(router, "d0"), 1);
  EXPECT_EQ(Suspected(router, "d1"), 0);
  EXPECT_NE(router.StderrTail(20000).find("vllm:nixl_num_failed_transfers_total"),
            std::string::npos);
}

}  // namespace
}  // namespace narwhal::testing
