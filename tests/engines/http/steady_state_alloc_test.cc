// No allocation per relayed frame in steady state: the engine adapter's
// decode loop (socket read, HTTP chunk parsing, SSE framing, the simdjson
// classification, the read-timer re-arm, the observer's Flush coroutine)
// allocates nothing once a stream is running.
//
// This binary replaces the global operator new with one that counts the
// allocations made on a thread while that thread's counting flag is on. The
// observer turns it on after the first frames of a real narwhal-sim decode
// stream and off a few hundred frames later. A new std::string, a
// std::function or a coroutine frame that is not recycled per frame would
// count ~300; what is allowed is a reused buffer growing to a new high-water
// mark when one read carries more than any before (amortized, not per frame).
#include <gtest/gtest.h>

#include <cstdlib>
#include <new>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "engines/clock.h"
#include "engines/engine_client.h"
#include "engines/http/beast_engine_client.h"
#include "engines/http/io_loops.h"
#include "engines/run_blocking.h"
#include "engines/stream_event.h"
#include "tests/fakes/blocking_legs.h"
#include "tests/fakes/sim_process.h"

namespace {

thread_local bool t_counting = false;
thread_local long long t_allocations = 0;

void* Allocate(std::size_t size) {
  if (t_counting) ++t_allocations;
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
  if (t_counting) ++t_allocations;
  return std::malloc(size == 0 ? 1 : size);
}
void* operator new[](std::size_t size, const std::nothrow_t&) noexcept {
  if (t_counting) ++t_allocations;
  return std::malloc(size == 0 ? 1 : size);
}
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }

namespace narwhal::engines {
namespace {

using json = nlohmann::json;
using ::narwhal::testing::SimProcess;

constexpr int kTokens = 400;
constexpr int kWarmupFrames = 50;  // the first frames may size buffers
constexpr int kCountedFrames = 300;
constexpr long long kGrowthAllocations = 8;

// Counts the allocations on the loop thread between frame kWarmupFrames and
// frame kWarmupFrames + kCountedFrames; itself allocates nothing.
class CountingObserver : public DecodeObserver {
 public:
  bool OnEvent(std::string_view data, const StreamEvent& event) override {
    ++frames_;
    bytes_ += data.size();
    tokens_ += event.tokens;
    if (frames_ == kWarmupFrames) {
      t_allocations = 0;
      t_counting = true;
    } else if (frames_ == kWarmupFrames + kCountedFrames) {
      t_counting = false;
      counted_ = t_allocations;
      window_done_ = true;
    }
    return true;
  }
  Awaitable<bool> Flush() override {
    ++flushes_;
    co_return true;
  }

  int frames_ = 0;
  int flushes_ = 0;
  long long tokens_ = 0;
  size_t bytes_ = 0;
  long long counted_ = -1;
  bool window_done_ = false;
};

TEST(SteadyStateAllocationTest, DecodeRelayAllocatesNothingPerFrame) {
  auto producer = SimProcess::Start({"--engine-id", "p0", "--role", "prefill"});
  ASSERT_TRUE(producer.ok()) << producer.status();
  auto consumer =
      SimProcess::Start({"--engine-id", "d0", "--role", "decode", "--token-interval-ms", "1"});
  ASSERT_TRUE(consumer.ok()) << consumer.status();

  RealClock clock;
  IoLoops loops(1);
  HttpEngineClientOptions options;
  options.first_token_timeout_s = 10;
  options.decode_read_timeout_s = 10;
  BeastEngineClient async(options, clock);
  ::narwhal::testing::BlockingLegs client(async, loops.executor(0));

  json body = json::parse(R"({"model": "Qwen/Qwen3-0.6B", "prompt": "Tell me a story",
                              "stream": true, "temperature": 0})");
  body["max_tokens"] = kTokens;
  LegOptions leg;
  leg.backend_request_id = "rid-alloc";
  leg.request_deadline = MonoClock::now() + std::chrono::seconds(60);
  const EngineTarget p0{"p0", (*producer)->url()};
  const EngineTarget d0{"d0", (*consumer)->url()};
  PrefillOutcome prefill = client.Prefill(p0, Api::kCompletions, body, leg);
  ASSERT_TRUE(prefill.ok()) << prefill.failure->detail;

  CountingObserver observer;
  DecodeOutcome decode =
      client.Decode(d0, *prefill.result, body, /*client_streams=*/true, leg, observer);
  ASSERT_TRUE(decode.ok()) << decode.failure->detail;
  ASSERT_TRUE(observer.window_done_) << "only " << observer.frames_ << " frames";
  EXPECT_EQ(observer.tokens_, kTokens);
  // The window spans many engine reads, each followed by a Flush.
  EXPECT_GE(observer.flushes_, kCountedFrames / 4);
  EXPECT_LE(observer.counted_, kGrowthAllocations)
      << "allocations over " << kCountedFrames << " relayed frames";
}

// The counter itself works: the same window around code that allocates.
TEST(SteadyStateAllocationTest, TheCounterSeesAllocations) {
  t_allocations = 0;
  t_counting = true;
  std::string* s = new std::string(100, 'x');
  t_counting = false;
  delete s;
  EXPECT_GE(t_allocations, 2);
}

}  // namespace
}  // namespace narwhal::engines
