// The gRPC door (server/grpc/grpc_door.h) against clients that are not gRPC
// clients, over raw loopback sockets: HTTP/1.1 or garbage on the gRPC port,
// a connection that stops half-way through its preface, and the door's bound
// on the request bytes of unfinished calls. Each costs only its own
// connection (closed), and the door goes on serving real gRPC clients.
#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "engines/http/io_loops.h"
#include "narwhal/v1/inference.grpc.pb.h"
#include "router/fleet/fleet.h"
#include "router/router.h"
#include "server/grpc/grpc_door.h"
#include "tests/fakes/fake_clock.h"
#include "tests/fakes/fake_engine_client.h"
#include "tests/server/grpc_door_for_test.h"

namespace narwhal::server {
namespace {

namespace nt = narwhal::testing;
namespace pb = narwhal::v1;

// A blocking TCP connection to 127.0.0.1:port; -1 on failure.
int HostileConnect(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Reads until the peer closes (true) or `timeout` passes (false).
bool HostileClosedWithin(int fd, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  char buffer[4096];
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    const ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) return true;  // EOF or reset
  }
  return false;
}

class GrpcDoorHostileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    settings_.model = "m";
    settings_.engines = {{"p0", "http://127.0.0.1:1", router::Role::kPrefill},
                         {"d0", "http://127.0.0.1:2", router::Role::kDecode}};
    fake_ = std::make_unique<nt::FakeEngineClient>(&clock_);
    fleet_ = std::make_unique<router::Fleet>(settings_, clock_, nullptr);
    router_ =
        std::make_unique<router::Router>(settings_, *fake_, *fleet_, clock_, nullptr, nullptr, 7);
    door_ = nt::StartGrpcDoor(settings_, *router_, clock_, loops_, "", &port_);
    ASSERT_NE(door_, nullptr);
  }

  void TearDown() override {
    nt::StopGrpcDoor(door_);
    router_.reset();
  }

  // A real client's Complete of `prompt`.
  grpc::Status CompletePrompt(const std::string& prompt) {
    auto stub = pb::Inference::NewStub(grpc::CreateChannel("127.0.0.1:" + std::to_string(port_),
                                                           grpc::InsecureChannelCredentials()));
    pb::GenerateRequest request;
    request.set_model("m");
    request.set_prompt(prompt);
    request.set_max_tokens(4);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    pb::CompleteResponse response;
    return stub->Complete(&ctx, request, &response);
  }

  // A real client's Complete still works.
  void ExpectServing() {
    const grpc::Status status = CompletePrompt("hello");
    EXPECT_TRUE(status.ok()) << status.error_message();
  }

  // Waits (real time) until the door has `n` connections.
  bool ConnectionsBecome(int n) {
    for (int i = 0; i < 200; ++i) {
      if (door_->open_connections() == n) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

  router::Settings settings_;
  nt::FakeClock clock_;
  engines::IoLoops loops_{2};
  std::unique_ptr<nt::FakeEngineClient> fake_;
  std::unique_ptr<router::Fleet> fleet_;
  std::unique_ptr<router::Router> router_;
  std::unique_ptr<GrpcDoor> door_;
  int port_ = 0;
};

TEST_F(GrpcDoorHostileTest, AnHttp1RequestClosesOnlyItsConnection) {
  const int fd = HostileConnect(port_);
  ASSERT_GE(fd, 0);
  const std::string request = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_EQ(::send(fd, request.data(), request.size(), 0), static_cast<ssize_t>(request.size()));
  EXPECT_TRUE(HostileClosedWithin(fd, std::chrono::seconds(5)));
  ::close(fd);
  EXPECT_TRUE(ConnectionsBecome(0));
  ExpectServing();
  EXPECT_TRUE(fake_->prefill_calls().size() == 1u);
}

TEST_F(GrpcDoorHostileTest, GarbageAfterTheClientPrefaceClosesOnlyItsConnection) {
  const int fd = HostileConnect(port_);
  ASSERT_GE(fd, 0);
  std::string bytes = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
  for (int i = 0; i < 512; ++i) bytes.push_back(static_cast<char>((i * 131 + 7) & 0xff));
  ASSERT_EQ(::send(fd, bytes.data(), bytes.size(), 0), static_cast<ssize_t>(bytes.size()));
  EXPECT_TRUE(HostileClosedWithin(fd, std::chrono::seconds(5)));
  ::close(fd);
  EXPECT_TRUE(ConnectionsBecome(0));
  ExpectServing();
}

TEST_F(GrpcDoorHostileTest, APrefaceThatStopsHalfWayIsClosedAtTheHeaderBound) {
  const size_t timers = clock_.pending_timers();
  const int fd = HostileConnect(port_);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(ConnectionsBecome(1));
  // The connection's bound is armed once it is served.
  for (int i = 0; i < 200 && clock_.pending_timers() == timers; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_GT(clock_.pending_timers(), timers);
  // Half the client preface, then nothing: a read came, the preface did not.
  const std::string half = "PRI * HTTP/2.0\r\n";
  ASSERT_EQ(::send(fd, half.data(), half.size(), 0), static_cast<ssize_t>(half.size()));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  // Before serving.header_timeout_s (10 s) the connection stays.
  clock_.Advance(9.0);
  EXPECT_FALSE(HostileClosedWithin(fd, std::chrono::milliseconds(300)));
  clock_.Advance(2.0);
  EXPECT_TRUE(HostileClosedWithin(fd, std::chrono::seconds(5)));
  ::close(fd);
  EXPECT_TRUE(ConnectionsBecome(0));
  ExpectServing();
}

TEST_F(GrpcDoorHostileTest, UnfinishedRequestBytesAreBoundedAcrossTheDoor) {
  nt::StopGrpcDoor(door_);
  GrpcDoorOptions options = GrpcDoorOptionsFrom(settings_, nullptr);
  options.connection.max_request_bytes_held = 64 * 1024;
  door_ = std::make_unique<GrpcDoor>(settings_, *router_, clock_, loops_, "", options);
  auto bound = door_->Bind("127.0.0.1", 0);
  ASSERT_TRUE(bound.ok()) << bound.status();
  port_ = *bound;
  door_->Start();

  const grpc::Status over = CompletePrompt(std::string(100 * 1024, 'a'));
  EXPECT_EQ(over.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << over.error_message();
  EXPECT_NE(over.error_message().find("unfinished requests"), std::string::npos)
      << over.error_message();
  EXPECT_TRUE(fake_->prefill_calls().empty());
  // What a refused or finished call held is given back: three requests of
  // 40 KiB, one after the other, each fit.
  for (int i = 0; i < 3; ++i) {
    const grpc::Status status = CompletePrompt(std::string(40 * 1024, 'b'));
    EXPECT_TRUE(status.ok()) << status.error_message();
  }
  EXPECT_EQ(fake_->prefill_calls().size(), 3u);
}

}  // namespace
}  // namespace narwhal::server
