// Server (server/server.h): narwhal-serve's wiring started and stopped in
// this process, on the embedded simulated fleet, with every listener on a
// free loopback port.
#include "server/server.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

namespace narwhal::server {
namespace {

using json = nlohmann::json;

ServerOptions Loopback() {
  ServerOptions options;
  options.http = "127.0.0.1:0";
  options.grpc = "127.0.0.1:0";
  options.admin = "127.0.0.1:0";
  options.health = "127.0.0.1:0";
  return options;
}

// Polls `path` on the probe listener until it answers `status` (the
// embedded engines pass their start-up checks within a second or two).
bool ProbeAnswers(const std::string& health, const std::string& path, int status) {
  const size_t colon = health.rfind(':');
  httplib::Client client(health.substr(0, colon), std::stoi(health.substr(colon + 1)));
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < until) {
    if (auto r = client.Get(path); r && r->status == status) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

TEST(ServerTest, ServesACompletionThenDrainsAndClosesEveryListener) {
  absl::StatusOr<std::unique_ptr<Server>> server = Server::Create(Loopback());
  ASSERT_TRUE(server.ok()) << server.status();
  const ServerAddresses at = (*server)->addresses();
  EXPECT_GT(at.http_port, 0);
  EXPECT_GT(at.grpc_port, 0);
  EXPECT_GT(at.admin_port, 0);
  EXPECT_NE(at.http_port, at.grpc_port);
  ASSERT_FALSE(at.health.empty());
  ASSERT_TRUE(ProbeAnswers(at.health, "/ready", 200));

  httplib::Client client(at.http_host, at.http_port);
  client.set_read_timeout(20, 0);
  const json request = {
      {"model", (*server)->model()}, {"prompt", "Tell me about narwhals"}, {"max_tokens", 4}};
  httplib::Result r = client.Post("/v1/completions", request.dump(), "application/json");
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 200) << r->body;
  const json body = json::parse(r->body, nullptr, false);
  ASSERT_TRUE(body.is_object()) << r->body;
  EXPECT_EQ(body["usage"]["completion_tokens"], 4) << r->body;
  EXPECT_FALSE(r->get_header_value("x-request-id").empty());

  // Nothing in flight: nothing cut; a second Shutdown does nothing.
  EXPECT_EQ((*server)->Shutdown("test"), 0u);
  EXPECT_EQ((*server)->Shutdown("test again"), 0u);
  httplib::Client after(at.http_host, at.http_port);
  after.set_connection_timeout(2, 0);
  EXPECT_FALSE(after.Get("/health")) << "the HTTP listener is still open after Shutdown";
}

TEST(ServerTest, AConfigThatCannotBeReadIsAnErrorThatNamesIt) {
  ServerOptions options = Loopback();
  options.config = "/nonexistent/narwhal-fleet.json";
  absl::StatusOr<std::unique_ptr<Server>> server = Server::Create(options);
  ASSERT_FALSE(server.ok());
  EXPECT_NE(server.status().message().find("/nonexistent/narwhal-fleet.json"), std::string::npos)
      << server.status();
}

TEST(ServerTest, AListenerThatCannotBindIsAnErrorAndStopsWhatStarted) {
  absl::StatusOr<std::unique_ptr<Server>> first = Server::Create(Loopback());
  ASSERT_TRUE(first.ok()) << first.status();
  ServerOptions options = Loopback();
  // The first router's gRPC port: the second one's gRPC listener cannot
  // have it (no port sharing), after its HTTP listener bound.
  options.grpc = "127.0.0.1:" + std::to_string((*first)->addresses().grpc_port);
  absl::StatusOr<std::unique_ptr<Server>> second = Server::Create(options);
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("cannot bind the gRPC listener"), std::string::npos)
      << second.status();
  // The first one is untouched and still serves.
  ASSERT_TRUE(ProbeAnswers((*first)->addresses().health, "/health", 200));
}

}  // namespace
}  // namespace narwhal::server
