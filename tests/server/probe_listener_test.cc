// The plaintext probe listener (server/probe_listener, listen.health): its
// three routes on loopback with a scripted fleet readiness and fake time,
// and the config key that turns it on.
#include "server/probe_listener.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "engines/http/io_loops.h"
#include "server/config/config_loader.h"
#include "tests/fakes/fake_clock.h"
#include "tests/server/raw_http_client.h"

namespace narwhal::server {
namespace {

namespace nt = narwhal::testing;
using json = nlohmann::json;
using std::chrono_literals::operator""s;

constexpr auto kWindow = 10s;

class ProbeListenerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    probes_.emplace(
        clock_, loops_,
        [this](std::string* why) {
          if (!fleet_ready_.load() && why != nullptr) *why = "no decode engine";
          return fleet_ready_.load();
        },
        kWindow);
    absl::StatusOr<int> port = probes_->Bind("127.0.0.1", 0);
    ASSERT_TRUE(port.ok()) << port.status();
    port_ = *port;
    probes_->Start();
  }
  void TearDown() override { probes_->Stop(); }

  // Status and body of one request on a fresh connection.
  std::pair<int, json> Get(const std::string& path, const std::string& method = "GET") {
    nt::RawHttpClient client(port_);
    EXPECT_TRUE(client.connected());
    EXPECT_TRUE(client.Send(method + " " + path + " HTTP/1.1\r\nHost: t\r\n\r\n"));
    std::optional<nt::RawResponse> response = client.Read();
    if (!response) return {0, json()};
    return {response->status, json::parse(response->body, nullptr, false)};
  }
  int Status(const std::string& path) { return Get(path).first; }

  nt::FakeClock clock_;
  engines::IoLoops loops_{1};
  std::atomic<bool> fleet_ready_{false};
  std::optional<ProbeListener> probes_;
  int port_ = 0;
};

TEST_F(ProbeListenerTest, HealthIsLiveWhateverTheFleet) {
  EXPECT_EQ(Get("/health"), std::make_pair(200, json{{"status", "ok"}}));
  fleet_ready_ = true;
  EXPECT_EQ(Status("/health"), 200);
}

TEST_F(ProbeListenerTest, ReadyFollowsTheFleetWithItsReason) {
  EXPECT_EQ(Get("/ready"),
            std::make_pair(503, json{{"status", "not_ready"}, {"reason", "no decode engine"}}));
  fleet_ready_ = true;
  EXPECT_EQ(Get("/ready"), std::make_pair(200, json{{"status", "ready"}}));
  clock_.Advance(kWindow + 1s);
  fleet_ready_ = false;
  EXPECT_EQ(Status("/ready"), 503);
}

TEST_F(ProbeListenerTest, ServingWaitsForTheFleetOnlyInTheStartupWindow) {
  // A new replica takes no traffic before its first engine checks...
  EXPECT_EQ(Get("/serving"), std::make_pair(503, json{{"status", "not_ready"},
                                                      {"reason", "starting: no decode engine"}}));
  fleet_ready_ = true;
  EXPECT_EQ(Get("/serving"), std::make_pair(200, json{{"status", "serving"}}));
  // ...and from then on it answers requests (503 backend_unavailable with
  // Retry-After from the door) however many engines are out.
  fleet_ready_ = false;
  EXPECT_EQ(Status("/serving"), 200);
  EXPECT_EQ(Status("/ready"), 503);
  clock_.Advance(kWindow);
  EXPECT_EQ(Status("/serving"), 200);
}

TEST_F(ProbeListenerTest, ServingAfterTheWindowEvenIfTheFleetNeverWasReady) {
  clock_.Advance(kWindow - 1s);
  EXPECT_EQ(Status("/serving"), 503);
  clock_.Advance(1s);
  EXPECT_EQ(Status("/serving"), 200);
}

TEST_F(ProbeListenerTest, DrainTurnsReadyAndServingButNotHealth) {
  fleet_ready_ = true;
  clock_.Advance(kWindow);
  probes_->BeginDrain();
  EXPECT_EQ(Get("/serving"),
            std::make_pair(503, json{{"status", "not_ready"}, {"reason", "shutting down"}}));
  EXPECT_EQ(Status("/ready"), 503);
  EXPECT_EQ(Status("/health"), 200);
}

TEST_F(ProbeListenerTest, ServesNothingButTheProbes) {
  fleet_ready_ = true;
  for (const char* path : {"/metrics", "/v1/models", "/", "/healthz"}) {
    EXPECT_EQ(Status(path), 404) << path;
  }
  EXPECT_EQ(Get("/v1/completions", "POST").first, 404);
  EXPECT_EQ(Get("/health", "POST").first, 404);
}

TEST_F(ProbeListenerTest, KeepAliveServesSeveralProbesOnOneConnection) {
  nt::RawHttpClient client(port_);
  for (const char* path : {"/health", "/ready", "/serving"}) {
    ASSERT_TRUE(client.Send(std::string("GET ") + path + " HTTP/1.1\r\nHost: t\r\n\r\n"));
    std::optional<nt::RawResponse> response = client.Read();
    ASSERT_TRUE(response) << path;
    EXPECT_TRUE(response->keep_alive) << path;
  }
}

TEST_F(ProbeListenerTest, ASecondListenerOnTheSamePortFailsToBind) {
  nt::FakeClock clock;
  ProbeListener other(
      clock, loops_, [](std::string*) { return true; }, kWindow);
  absl::StatusOr<int> port = other.Bind("127.0.0.1", port_);
  ASSERT_FALSE(port.ok());
  EXPECT_NE(port.status().message().find("cannot bind the health listener to 127.0.0.1:"),
            std::string::npos)
      << port.status();
}

TEST(ProbeStartupWindowTest, ConnectPlusHealthBound) {
  EXPECT_EQ(ProbeStartupWindow(5, 5), std::chrono::seconds(10));
  EXPECT_EQ(ProbeStartupWindow(10, 2.5), std::chrono::milliseconds(12500));
}

json MinimalConfig() {
  return {{"model", "m"},
          {"engines",
           {{{"iid", "p0"}, {"url", "http://127.0.0.1:8100"}, {"role", "prefill"}},
            {{"iid", "d0"}, {"url", "http://127.0.0.1:8200"}, {"role", "decode"}}}}};
}

TEST(ProbeListenerConfigTest, ListenHealthIsOffUnlessSet) {
  absl::StatusOr<router::Settings> off = ParseFleetConfig(MinimalConfig().dump());
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_EQ(off->listen.health, "");
  EXPECT_FALSE(SettingsToProto(*off).listen().has_health());

  json config = MinimalConfig();
  config["listen"] = {{"health", "0.0.0.0:8081"}};
  absl::StatusOr<router::Settings> on = ParseFleetConfig(config.dump());
  ASSERT_TRUE(on.ok()) << on.status();
  EXPECT_EQ(on->listen.health, "0.0.0.0:8081");
  EXPECT_EQ(SettingsToProto(*on).listen().health(), "0.0.0.0:8081");
}

TEST(ProbeListenerConfigTest, ListenHealthMustBeHostPort) {
  for (const char* bad : {"8081", "", ":8081", "h:70000"}) {
    json config = MinimalConfig();
    config["listen"] = {{"health", bad}};
    absl::StatusOr<router::Settings> s = ParseFleetConfig(config.dump());
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_NE(s.status().message().find("listen.health must be HOST:PORT"), std::string::npos)
        << s.status();
  }
}

}  // namespace
}  // namespace narwhal::server
