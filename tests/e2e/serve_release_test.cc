// End to end through both front doors: a client that goes away between its
// prefill and its decode leaves no KV handoff pinned on the producer — the
// router releases it (handoff.release "pull") and the producer's lease is
// freed within a second, as GET /sim/kv on the producer shows; with
// handoff.release "off" it stays pinned.
//
// The window between the two legs is made wide and deterministic by a
// consumer whose TCP accept queue is full: the router's connect to it hangs,
// so the decode request never reaches a consumer while the client hangs up.
// A second, working consumer serves the other requests and the release.
#include <arpa/inet.h>
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "narwhal/v1/inference.grpc.pb.h"
#include "tests/e2e/e2e_util.h"

namespace narwhal::testing {
namespace {

// A listener nobody accepts on, with its accept queue already full: a new
// connection's SYN is dropped, so connecting to it hangs.
class StuckListener {
 public:
  StuckListener() {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd_ < 0 || bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        listen(fd_, 0) != 0) {
      return;
    }
    socklen_t len = sizeof(addr);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    for (int i = 0; i < 3; ++i) {
      const int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
      connect(c, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
      fillers_.push_back(c);
    }
    absl::SleepFor(absl::Milliseconds(100));  // the handshakes that fit are done
  }
  ~StuckListener() {
    for (int c : fillers_) close(c);
    if (fd_ >= 0) close(fd_);
  }
  bool ok() const { return port_ > 0; }
  std::string url() const { return absl::StrCat("http://127.0.0.1:", port_); }

 private:
  int fd_ = -1;
  int port_ = 0;
  std::vector<int> fillers_;
};

std::unique_ptr<SimProcess> StartSim(std::vector<std::string> args) {
  auto sim = SimProcess::Start(std::move(args));
  EXPECT_TRUE(sim.ok()) << sim.status();
  return sim.ok() ? *std::move(sim) : nullptr;
}

class ServeReleaseTest : public E2eTest {
 protected:
  void SetUp() override {
    E2eTest::SetUp();
    ASSERT_TRUE(stuck_.ok());
    producer_ = StartSim({"--engine-id", "rp0", "--role", "prefill"});
    consumer_ = StartSim({"--engine-id", "rd0", "--role", "decode"});
    ASSERT_NE(producer_, nullptr);
    ASSERT_NE(consumer_, nullptr);
  }

  ServeProcess& Router(const std::string& release) {
    return StartRouterWith({{"rp0", producer_->url(), "prefill"},
                            {"stuck", stuck_.url(), "decode"},
                            {"rd0", consumer_->url(), "decode"}},
                           {{"handoff", {{"release", release}}},
                            // The client hangs up well inside the first-token budget.
                            {"engine", {{"first_token_timeout_s", 5}, {"connect_timeout_s", 5}}}});
  }

  json Kv() {
    absl::StatusOr<json> kv = producer_->Kv();
    EXPECT_TRUE(kv.ok()) << kv.status();
    return kv.ok() ? *kv : json::object();
  }
  size_t Held() { return Kv()["held"].size(); }

  // Whether the router is connecting a decode leg to the stuck consumer.
  bool OnStuckConsumer(ServeProcess& router) {
    return MetricSum(Metrics(router), "narwhal_engine_inflight",
                     {{"iid", "stuck"}, {"phase", "decode"}}) >= 1;
  }

  // Waits until the request either holds a handoff while its decode is
  // stuck (true) or `finished()` (false).
  bool WaitStuck(ServeProcess& router, const std::function<bool()>& finished) {
    bool stuck = false;
    WaitUntil(
        [&] {
          stuck = Held() > 0 && OnStuckConsumer(router);
          return stuck || finished();
        },
        absl::Seconds(4), absl::Milliseconds(5));
    return stuck;
  }

  // Waits until the router has counted `n` releases with `outcome`.
  double WaitReleases(ServeProcess& router, const std::string& outcome, double n) {
    double seen = 0;
    WaitUntil(
        [&] {
          seen =
              MetricSum(Metrics(router), "narwhal_handoff_releases_total", {{"outcome", outcome}});
          return seen >= n;
        },
        absl::Seconds(3));
    return seen;
  }

  // After a hang-up at `hung_up`: the producer holds nothing within a second
  // and the handoff went to the working consumer (a pull).
  void ExpectFreedWithinASecond(absl::Time hung_up) {
    const bool freed =
        WaitUntil([&] { return Held() == 0; }, absl::Seconds(3), absl::Milliseconds(5));
    const absl::Duration took = absl::Now() - hung_up;
    EXPECT_TRUE(freed) << Kv().dump();
    EXPECT_LT(took, absl::Seconds(1)) << "the lease was freed " << took << " after the hang-up";
    const json kv = Kv();
    ASSERT_FALSE(kv["consumed"].empty()) << kv.dump();
    EXPECT_EQ(kv["consumed"].back()["consumer"]["engine_id"], "rd0");
  }

  StuckListener stuck_;
  std::unique_ptr<SimProcess> producer_;
  std::unique_ptr<SimProcess> consumer_;
};

TEST_F(ServeReleaseTest, HttpClientGoneAfterPrefillLeavesNothingPinned) {
  ServeProcess& router = Router("pull");
  int abandoned = 0;
  for (int i = 0; i < 6 && abandoned < 2; ++i) {
    auto client =
        RawClient::Post(router.http_port(), kCompletions,
                        Completion("hang up after prefill " + std::to_string(i), 4, true).dump());
    ASSERT_TRUE(client->connected());
    CountRequest(router);
    const bool stuck = WaitStuck(router, [&] {
      client->ReadFor(absl::Milliseconds(1));
      return client->received().find("[DONE]") != std::string::npos;
    });
    if (!stuck) {
      // Placed on the working consumer: it completed and pulled the handoff.
      ASSERT_NE(client->received().find("[DONE]"), std::string::npos) << client->received();
      continue;
    }
    ++abandoned;
    ExpectFreedWithinASecond(client->Close());
  }
  ASSERT_GE(abandoned, 1) << "no request was placed on the stuck consumer";
  const std::vector<MetricSample> m = Metrics(router);
  EXPECT_EQ(MetricSum(m, "narwhal_handoffs_abandoned_total", {{"reason", "cancelled"}}), abandoned);
  EXPECT_EQ(WaitReleases(router, "released", abandoned), abandoned);
  std::vector<json> rows = router.WaitJournalRows(CountedRequests(router));
  int released_rows = 0;
  for (const json& row : rows) {
    if (row["handoff_abandoned"] == "cancelled") {
      EXPECT_EQ(row["terminal"], "cancelled");
      EXPECT_EQ(row["handoff_released"], true);
      ++released_rows;
    }
  }
  EXPECT_EQ(released_rows, abandoned);
}

TEST_F(ServeReleaseTest, WithReleaseOffTheHandoffStaysPinned) {
  ServeProcess& router = Router("off");
  int abandoned = 0;
  for (int i = 0; i < 6 && abandoned < 1; ++i) {
    auto client = RawClient::Post(router.http_port(), kCompletions,
                                  Completion("pinned " + std::to_string(i), 4, true).dump());
    ASSERT_TRUE(client->connected());
    CountRequest(router);
    const bool stuck = WaitStuck(router, [&] {
      client->ReadFor(absl::Milliseconds(1));
      return client->received().find("[DONE]") != std::string::npos;
    });
    if (!stuck) continue;
    ++abandoned;
    client->Close();
    absl::SleepFor(absl::Milliseconds(1500));
    EXPECT_EQ(Held(), 1u) << Kv().dump();
  }
  ASSERT_EQ(abandoned, 1);
  EXPECT_EQ(MetricSum(Metrics(router), "narwhal_handoff_releases_total", {{"outcome", "off"}}), 1);
}

TEST_F(ServeReleaseTest, GrpcClientGoneAfterPrefillLeavesNothingPinned) {
  ServeProcess& router = Router("pull");
  auto channel = grpc::CreateChannel(router.grpc_target(), grpc::InsecureChannelCredentials());
  auto stub = narwhal::v1::Inference::NewStub(channel);
  int abandoned = 0;
  for (int i = 0; i < 6 && abandoned < 2; ++i) {
    narwhal::v1::GenerateRequest req;
    req.set_model(kModel);
    req.set_prompt("grpc hang up after prefill " + std::to_string(i));
    req.set_max_tokens(4);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    std::atomic<bool> done{false};
    grpc::Status status;
    CountRequest(router);
    std::thread call([&] {
      auto reader = stub->Generate(&context, req);
      narwhal::v1::GenerateResponse response;
      while (reader->Read(&response)) {
      }
      status = reader->Finish();
      done = true;
    });
    const bool stuck = WaitStuck(router, [&] { return done.load(); });
    absl::Time hung_up;
    if (stuck) {
      hung_up = absl::Now();
      context.TryCancel();
    }
    call.join();
    if (!stuck) {
      EXPECT_TRUE(status.ok()) << status.error_message();
      continue;
    }
    ++abandoned;
    EXPECT_EQ(status.error_code(), grpc::StatusCode::CANCELLED);
    ExpectFreedWithinASecond(hung_up);
  }
  ASSERT_GE(abandoned, 1) << "no request was placed on the stuck consumer";
  EXPECT_EQ(WaitReleases(router, "released", abandoned), abandoned);
}

}  // namespace
}  // namespace narwhal::testing
