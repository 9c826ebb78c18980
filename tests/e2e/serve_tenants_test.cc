// Tenants through narwhal-serve (SPEC §16, serving.api_keys): each door
// takes a tenant's key and journals and counts the tenant by name (never the
// key); a tenant beyond its max_inflight or its token bucket gets 429 with
// Retry-After (gRPC RESOURCE_EXHAUSTED with ErrorInfo.retry_after_s); a
// rotated key file takes effect on SIGHUP.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <csignal>
#include <fstream>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "google/rpc/status.pb.h"
#include "narwhal/v1/inference.grpc.pb.h"
#include "tests/e2e/e2e_util.h"

namespace narwhal::testing {
namespace {

constexpr char kSearchKey[] = "search-key-7Qx";
constexpr char kBatchKey[] = "batch-key-9Lm";

httplib::Headers Bearer(const std::string& key) { return {{"Authorization", "Bearer " + key}}; }

HttpCaptureOptions WithKey(const std::string& key) { return WithHeaders(Bearer(key)); }

// The gRPC status of a Complete call with `key` (and the ErrorInfo of a
// failure).
struct GrpcAnswer {
  grpc::StatusCode code = grpc::StatusCode::OK;
  narwhal::v1::ErrorInfo info;
};

GrpcAnswer GrpcComplete(ServeProcess& router, const std::string& key) {
  auto stub = narwhal::v1::Inference::NewStub(
      grpc::CreateChannel(router.grpc_target(), grpc::InsecureChannelCredentials()));
  narwhal::v1::GenerateRequest request;
  request.set_model(kModel);
  request.set_prompt("tenants over grpc");
  request.set_max_tokens(3);
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", "Bearer " + key);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  narwhal::v1::CompleteResponse response;
  const grpc::Status status = stub->Complete(&ctx, request, &response);
  GrpcAnswer answer;
  answer.code = status.error_code();
  google::rpc::Status details;
  if (!status.ok() && details.ParseFromString(status.error_details()) &&
      details.details_size() > 0) {
    details.details(0).UnpackTo(&answer.info);
  }
  return answer;
}

class ServeTenantsTest : public E2eTest {
 protected:
  void SetUp() override {
    E2eTest::SetUp();
    auto dir = MakeScratchDir("tenants_");
    ASSERT_TRUE(dir.ok()) << dir.status();
    key_file_ = *dir + "/batch.key";
    WriteKey(std::string(kBatchKey) + "\n");
  }

  void WriteKey(const std::string& text) {
    std::ofstream out(key_file_ + ".tmp", std::ios::trunc);
    out << text;
    out.close();
    ASSERT_EQ(std::rename((key_file_ + ".tmp").c_str(), key_file_.c_str()), 0);
  }

  ServeProcess& StartTenantRouter(const json& search, const json& batch) {
    json s = search;
    s["name"] = "search";
    s["key_env"] = "NARWHAL_E2E_SEARCH_KEY";
    json b = batch;
    b["name"] = "batch";
    b["key_file"] = key_file_;
    return StartRouter({"p0", "d0"}, {{"serving", {{"api_keys", {s, b}}}}},
                       {{"NARWHAL_E2E_SEARCH_KEY", kSearchKey}});
  }

  std::string key_file_;
};

TEST_F(ServeTenantsTest, BothDoorsNameTheTenantInTheJournalAndMetricsNeverTheKey) {
  ServeProcess& router = StartTenantRouter(json::object(), json::object());
  HttpCapture ok =
      Send(router, kCompletions, Completion("tenant a", 3, false), WithKey(kSearchKey));
  ASSERT_EQ(ok.status, 200) << Describe(ok);
  EXPECT_EQ(JournalRow(router, ok)["tenant"], "search");
  HttpCapture streamed = Send(router, kChat, Chat("tenant b", 3, true), WithKey(kBatchKey));
  ASSERT_EQ(streamed.status, 200) << Describe(streamed);
  EXPECT_TRUE(streamed.saw_done());
  EXPECT_EQ(JournalRow(router, streamed)["tenant"], "batch");

  // No key, a wrong key, the old single-key form: 401, no tenant.
  for (const httplib::Headers& headers :
       {httplib::Headers{}, Bearer("search-key-7Q"), Bearer(std::string(kSearchKey) + "x")}) {
    HttpCapture refused =
        Send(router, kCompletions, Completion("no tenant", 3, false), WithHeaders(headers));
    EXPECT_EQ(refused.status, 401) << Describe(refused);
    const json row = JournalRow(router, refused);
    EXPECT_TRUE(row["tenant"].is_null()) << row.dump();
  }

  EXPECT_EQ(GrpcComplete(router, kBatchKey).code, grpc::StatusCode::OK);
  CountRequest(router);
  EXPECT_EQ(GrpcComplete(router, "nope").code, grpc::StatusCode::UNAUTHENTICATED);
  CountRequest(router);

  const std::vector<MetricSample> metrics = Metrics(router);
  EXPECT_EQ(MetricSum(metrics, "narwhal_tenant_requests_total",
                      {{"tenant", "search"}, {"terminal", "completed"}}),
            1);
  EXPECT_EQ(MetricSum(metrics, "narwhal_tenant_requests_total",
                      {{"tenant", "batch"}, {"terminal", "completed"}}),
            2);
  EXPECT_EQ(MetricSum(metrics, "narwhal_tenant_inflight", {{"tenant", "batch"}}), 0);
  const std::vector<json> rows = router.WaitJournalRows(CountedRequests(router));
  const std::string all =
      router.Stderr() + json(rows).dump() + HttpGet(router.http_port(), "/metrics").body;
  EXPECT_FALSE(absl::StrContains(all, kSearchKey));
  EXPECT_FALSE(absl::StrContains(all, kBatchKey));
}

TEST_F(ServeTenantsTest, ATenantBeyondItsInFlightBoundGets429OnBothDoorsOthersDoNot) {
  ServeProcess& router = StartTenantRouter({{"max_inflight", 1}}, json::object());
  // The search tenant's one place is taken by a request whose prefill is held.
  SetFaults("p0", {{{"kind", "delay_headers"}, {"phase", "prefill"}, {"ms", 3000}, {"times", 1}}});
  HttpCapture held;
  std::thread holder([&] {
    held = PostCapture("127.0.0.1", router.http_port(), kCompletions,
                       Completion("held", 3, false).dump(), WithKey(kSearchKey));
  });
  CountRequest(router);
  ASSERT_TRUE(WaitUntil(
      [&] {
        return ScrapedMetric(router, "narwhal_tenant_inflight", {{"tenant", "search"}}) == 1;
      },
      absl::Seconds(10)));
  HttpCapture refused =
      Send(router, kCompletions, Completion("over", 3, false), WithKey(kSearchKey));
  EXPECT_EQ(refused.status, 429) << Describe(refused);
  EXPECT_EQ(Header(refused, "Retry-After"), "1");
  EXPECT_EQ(ErrorOf(refused.body)["type"], "rate_limit_error");
  const json row = JournalRow(router, refused);
  EXPECT_EQ(row["tenant"], "search");
  EXPECT_EQ(row["reason"], "tenant_inflight_limit");
  EXPECT_EQ(row["terminal"], "rejected");

  const GrpcAnswer over = GrpcComplete(router, kSearchKey);
  CountRequest(router);
  EXPECT_EQ(over.code, grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(over.info.http_status(), 429);
  EXPECT_EQ(over.info.retry_after_s(), 1);

  // Another tenant is not held back by it.
  HttpCapture other =
      Send(router, kCompletions, Completion("other tenant", 3, false), WithKey(kBatchKey));
  EXPECT_EQ(other.status, 200) << Describe(other);
  holder.join();
  EXPECT_EQ(held.status, 200) << Describe(held);
  // The place came back with the held request's end.
  HttpCapture again =
      Send(router, kCompletions, Completion("again", 3, false), WithKey(kSearchKey));
  EXPECT_EQ(again.status, 200) << Describe(again);
  EXPECT_EQ(ScrapedMetric(router, "narwhal_tenant_throttled_total",
                          {{"tenant", "search"}, {"limit", "inflight"}}),
            2);
}

TEST_F(ServeTenantsTest, AnEmptyBucketGets429WithTheSecondsToTheNextToken) {
  // One request per 100 s, two at once.
  ServeProcess& router =
      StartTenantRouter(json::object(), {{"requests_per_s", 0.01}, {"burst", 2}});
  for (int i = 0; i < 2; ++i) {
    HttpCapture ok = Send(router, kCompletions, Completion("bucket", 3, false), WithKey(kBatchKey));
    ASSERT_EQ(ok.status, 200) << Describe(ok);
  }
  HttpCapture refused =
      Send(router, kCompletions, Completion("bucket", 3, false), WithKey(kBatchKey));
  ASSERT_EQ(refused.status, 429) << Describe(refused);
  const int retry_after = std::stoi(Header(refused, "Retry-After"));
  EXPECT_GE(retry_after, 95);
  EXPECT_LE(retry_after, 100);
  EXPECT_EQ(JournalRow(router, refused)["reason"], "tenant_rate_limit");

  const GrpcAnswer grpc_refused = GrpcComplete(router, kBatchKey);
  CountRequest(router);
  EXPECT_EQ(grpc_refused.code, grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_GE(grpc_refused.info.retry_after_s(), 95);
  EXPECT_NE(grpc_refused.info.message().find("tenant batch rate limit reached"), std::string::npos)
      << grpc_refused.info.message();
  // The search tenant has no bucket.
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(Send(router, kCompletions, Completion("free", 3, false), WithKey(kSearchKey)).status,
              200);
  }
  EXPECT_EQ(ScrapedMetric(router, "narwhal_tenant_throttled_total",
                          {{"tenant", "batch"}, {"limit", "rate"}}),
            2);
}

TEST_F(ServeTenantsTest, ARotatedKeyFileTakesEffectOnSighup) {
  ServeProcess& router = StartTenantRouter(json::object(), json::object());
  ASSERT_EQ(Send(router, kCompletions, Completion("old key", 3, false), WithKey(kBatchKey)).status,
            200);
  WriteKey("batch-key-rotated\n");
  router.Signal(SIGHUP);
  ASSERT_TRUE(
      WaitUntil([&] { return absl::StrContains(router.Stderr(), "keys changed serving.api_keys"); },
                absl::Seconds(15)))
      << router.StderrTail();
  EXPECT_EQ(Send(router, kCompletions, Completion("old key", 3, false), WithKey(kBatchKey)).status,
            401);
  HttpCapture rotated =
      Send(router, kCompletions, Completion("new key", 3, false), WithKey("batch-key-rotated"));
  EXPECT_EQ(rotated.status, 200) << Describe(rotated);
  EXPECT_EQ(JournalRow(router, rotated)["tenant"], "batch");
  EXPECT_FALSE(absl::StrContains(router.Stderr(), "batch-key-rotated"));
}

}  // namespace
}  // namespace narwhal::testing
