// No allocation per relayed frame on the whole HTTP path in steady state:
// engine socket read → SSE framing → classification → the router's relay
// (AttemptRelay) → the HTTP door's SseSink → one chunked write to the client.
//
// The router core, the Beast engine adapter and the HTTP door run in this
// process on one event loop, in front of two narwhal-sim processes; the
// client is a plain socket on the test thread. A counting global operator
// new counts allocations on every thread but the test's while the window is
// open: from the client's 50th relayed frame to its 350th. One allocation per
// frame would count ~300; what is allowed is a reused buffer growing to a new
// high-water mark when one engine read carries more frames than any before
// (amortized, not per frame): at most kGrowthAllocations in the window.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <prometheus/registry.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <new>
#include <nlohmann/json.hpp>
#include <string>

#include "engines/clock.h"
#include "engines/http/beast_engine_client.h"
#include "engines/http/io_loops.h"
#include "router/common/settings.h"
#include "router/fleet/fleet.h"
#include "router/router.h"
#include "server/http/openai_shim.h"
#include "tests/fakes/sim_process.h"

namespace {

std::atomic<bool> g_counting{false};
std::atomic<long long> g_allocations{0};
thread_local bool t_excluded = false;

void Count() noexcept {
  if (g_counting.load(std::memory_order_relaxed) && !t_excluded) {
    g_allocations.fetch_add(1, std::memory_order_relaxed);
  }
}

void* Allocate(std::size_t size) {
  Count();
  if (size == 0) size = 1;
  void* p = std::malloc(size);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

}  // namespace

void* operator new(std::size_t size) { return Allocate(size); }
void* operator new[](std::size_t size) { return Allocate(size); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
// The nothrow forms too (simdjson uses them): every form that frees with
// std::free must allocate with std::malloc, or a sanitizer sees a mismatch.
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  Count();
  return std::malloc(size == 0 ? 1 : size);
}
void* operator new[](std::size_t size, const std::nothrow_t&) noexcept {
  Count();
  return std::malloc(size == 0 ? 1 : size);
}
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }

namespace narwhal::server {
namespace {

using json = nlohmann::json;
using ::narwhal::testing::SimProcess;

constexpr int kTokens = 500;
constexpr int kWindowStart = 50;
constexpr int kWindowEnd = 350;
constexpr long long kGrowthAllocations = 8;

int Connect(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

TEST(RelayAllocationTest, HttpRelayAllocatesNothingPerFrame) {
  t_excluded = true;  // the client on this thread allocates as it likes
  auto producer = SimProcess::Start({"--engine-id", "p0", "--role", "prefill"});
  ASSERT_TRUE(producer.ok()) << producer.status();
  auto consumer =
      SimProcess::Start({"--engine-id", "d0", "--role", "decode", "--token-interval-ms", "1"});
  ASSERT_TRUE(consumer.ok()) << consumer.status();

  engines::IoLoops loops(1);
  engines::RealClock clock;
  router::Settings settings;
  settings.model = "Qwen/Qwen3-0.6B";
  settings.engines = {{"p0", (*producer)->url(), router::Role::kPrefill},
                      {"d0", (*consumer)->url(), router::Role::kDecode}};
  engines::HttpEngineClientOptions options;
  options.first_token_timeout_s = 10;
  options.decode_read_timeout_s = 10;
  engines::BeastEngineClient engine_client(options, clock);
  prometheus::Registry registry;
  router::Fleet fleet(settings, clock, nullptr);
  router::Router router(settings, engine_client, fleet, clock, nullptr, nullptr, 7);
  OpenAiShim shim(settings, router, fleet, clock, registry, "", loops);
  absl::StatusOr<int> port = shim.Bind("127.0.0.1", 0);
  ASSERT_TRUE(port.ok()) << port.status();
  shim.Start();

  const std::string body = json{
      {"model", settings.model},
      {"prompt", "Tell me a story"},
      {"max_tokens", kTokens},
      {"stream", true}}.dump();
  const std::string request =
      "POST /v1/completions HTTP/1.1\r\nHost: t\r\n"
      "Content-Type: application/json\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  const int fd = Connect(*port);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::send(fd, request.data(), request.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(request.size()));

  std::string received;
  int frames = 0;
  long long counted = -1;
  bool done = false;
  char buf[64 * 1024];
  while (!done) {
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    received.append(buf, static_cast<size_t>(n));
    frames = 0;
    for (size_t at = 0; (at = received.find("data: ", at)) != std::string::npos; at += 6) ++frames;
    if (frames >= kWindowStart && counted < 0 && !g_counting) {
      g_allocations = 0;
      g_counting = true;
    }
    if (frames >= kWindowEnd && g_counting) {
      g_counting = false;
      counted = g_allocations.load();
    }
    done = received.find("data: [DONE]") != std::string::npos;
  }
  ::close(fd);
  g_counting = false;
  shim.StopAccepting();
  shim.Join();

  ASSERT_TRUE(done) << "stream did not finish; " << frames << " frames";
  ASSERT_GE(counted, 0) << "the window never closed";
  EXPECT_NE(received.find("HTTP/1.1 200"), std::string::npos);
  EXPECT_LE(counted, kGrowthAllocations)
      << "allocations while ~" << (kWindowEnd - kWindowStart) << " frames were relayed";
}

}  // namespace
}  // namespace narwhal::server
