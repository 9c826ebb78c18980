// AccessLog (--access-log): the line of a finished request (identity,
// outcome, engines, timings, token counts — never the prompt), lines written
// by the log's own thread, and drop-and-count when the writer falls behind
// (held through the write seam: no sleeps). Through the Router: one line per
// request, refusals included.
#include "router/access_log.h"

#include <gtest/gtest.h>
#include <prometheus/registry.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engines/http/io_loops.h"
#include "router/common/metrics.h"
#include "router/fleet/fleet.h"
#include "router/router.h"
#include "server/status_table.h"
#include "tests/fakes/fake_clock.h"
#include "tests/fakes/fake_engine_client.h"
#include "tests/fakes/test_sink.h"
#include "tests/router/test_util.h"

namespace narwhal::router {
namespace {

namespace nt = ::narwhal::testing;
using namespace std::chrono_literals;
using json = nlohmann::json;

constexpr char kSecretPrompt[] = "the secret prompt text";

Request SampleRequest() {
  Request r;
  r.rid = "rid-1";
  r.client_rid = "client-7";
  r.tenant = "search";
  r.door = Door::kGrpc;
  r.api = engines::Api::kChatCompletions;
  r.stream = true;
  r.body = {{"model", "Qwen/Qwen3-0.6B"},
            {"messages", {{{"role", "user"}, {"content", kSecretPrompt}}}},
            {"max_tokens", 8}};
  return r;
}

Outcome Completed() {
  Outcome o;
  o.terminal = Terminal::kCompleted;
  o.ttft_s = 0.012;
  o.first_byte_s = 0.015;
  o.output_tokens = 8;
  o.prompt_tokens = 12;
  return o;
}

std::vector<json> ReadLines(const std::string& path) { return nt::ReadJournal(path); }

TEST(AccessLogLineTest, CarriesIdentityOutcomeEnginesTimingsAndTokens) {
  RequestRecord record;
  record.prefill_iid = "p0";
  record.decode_iid = "d1";
  record.attempts = 2;
  const server::StatusTableJournal table{};
  const json line =
      AccessLog::Line(SampleRequest(), Completed(), record, 0.25, 1.7e9 + 0.5, &table);
  EXPECT_EQ(line["ts"], "2023-11-14T22:13:20.500Z");
  EXPECT_EQ(line["rid"], "rid-1");
  EXPECT_EQ(line["client_rid"], "client-7");
  EXPECT_EQ(line["tenant"], "search");
  EXPECT_EQ(line["door"], "grpc");
  EXPECT_EQ(line["api"], "chat");
  EXPECT_EQ(line["model"], "Qwen/Qwen3-0.6B");
  EXPECT_EQ(line["stream"], true);
  EXPECT_EQ(line["status"], 200);
  EXPECT_EQ(line["terminal"], "completed");
  EXPECT_TRUE(line["reason"].is_null());
  EXPECT_EQ(line["prefill_iid"], "p0");
  EXPECT_EQ(line["decode_iid"], "d1");
  EXPECT_EQ(line["attempts"], 2);
  EXPECT_DOUBLE_EQ(line["ttft_s"].get<double>(), 0.012);
  EXPECT_DOUBLE_EQ(line["first_byte_s"].get<double>(), 0.015);
  EXPECT_DOUBLE_EQ(line["duration_s"].get<double>(), 0.25);
  EXPECT_EQ(line["prompt_tokens"], 12);
  EXPECT_EQ(line["output_tokens"], 8);
  EXPECT_EQ(line.dump().find(kSecretPrompt), std::string::npos) << line.dump();
}

TEST(AccessLogLineTest, ARefusalHasNoEnginesAndAClientThatLeftHasNoStatus) {
  const server::StatusTableJournal table{};
  Outcome refused;
  refused.terminal = Terminal::kInvalid;
  refused.reason = Reason::kInvalidRequest;
  json line = AccessLog::Line(SampleRequest(), refused, RequestRecord{}, 0.001, 1.7e9, &table);
  EXPECT_EQ(line["status"], 400);
  EXPECT_EQ(line["terminal"], "invalid");
  EXPECT_EQ(line["reason"], "invalid_request");
  EXPECT_TRUE(line["prefill_iid"].is_null());
  EXPECT_EQ(line["attempts"], 0);
  EXPECT_TRUE(line["ttft_s"].is_null());
  EXPECT_TRUE(line["prompt_tokens"].is_null());
  Request untenanted = SampleRequest();
  untenanted.tenant.clear();
  EXPECT_TRUE(AccessLog::Line(untenanted, refused, RequestRecord{}, 0.001, 1.7e9, &table)["tenant"]
                  .is_null());

  Outcome gone;
  gone.terminal = Terminal::kCancelled;
  gone.reason = Reason::kCancelled;
  line = AccessLog::Line(SampleRequest(), gone, RequestRecord{}, 0.001, 1.7e9, &table);
  EXPECT_TRUE(line["status"].is_null());
}

// A write seam that holds every call until opened.
class HeldWriter {
 public:
  AccessLogOptions Options(size_t max_pending) {
    AccessLogOptions o;
    o.max_pending_lines = max_pending;
    o.write = [this](int fd, const void* data, size_t size) {
      std::unique_lock<std::mutex> lock(mu_);
      ++held_;
      cv_.notify_all();
      cv_.wait(lock, [&] { return open_; });
      return ::write(fd, data, size);
    };
    return o;
  }
  void WaitHeld() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return held_ > 0; });
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
  int held_ = 0;
};

class AccessLogFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = ::testing::TempDir() + "access_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name() + "_" +
            std::to_string(::getpid()) + ".log";
    std::remove(path_.c_str());
  }
  void TearDown() override { std::remove(path_.c_str()); }
  std::string path_;
};

TEST_F(AccessLogFileTest, OneLinePerRecordedRequestInOrder) {
  auto log = AccessLog::Open(path_);
  ASSERT_TRUE(log.ok()) << log.status();
  for (int i = 0; i < 3; ++i) {
    Request r = SampleRequest();
    r.rid = "rid-" + std::to_string(i);
    (*log)->Record(r, Completed(), RequestRecord{}, 0.1, 1.7e9, nullptr);
  }
  (*log)->Flush();
  const std::vector<json> lines = ReadLines(path_);
  ASSERT_EQ(lines.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(lines[i]["rid"], "rid-" + std::to_string(i));
  EXPECT_EQ((*log)->lines(), 3);
  EXPECT_EQ((*log)->dropped(), 0);
}

TEST_F(AccessLogFileTest, AStuckWriterNeverBlocksRecordItDropsAndCounts) {
  HeldWriter held;
  auto log = AccessLog::Open(path_, held.Options(/*max_pending=*/4));
  ASSERT_TRUE(log.ok()) << log.status();
  (*log)->Record(SampleRequest(), Completed(), RequestRecord{}, 0.1, 1.7e9, nullptr);
  held.WaitHeld();  // the writer is stuck inside write(2) with line 1
  // Three more fill the bound; the rest are dropped, and Record returns.
  for (int i = 0; i < 10; ++i)
    (*log)->Record(SampleRequest(), Completed(), RequestRecord{}, 0.1, 1.7e9, nullptr);
  EXPECT_EQ((*log)->dropped(), 7);
  held.Open();
  (*log)->Flush();
  EXPECT_EQ(ReadLines(path_).size(), 4u);
  EXPECT_EQ((*log)->lines(), 4);
}

TEST(AccessLogOpenTest, AnUnwritablePathIsAClearError) {
  auto log = AccessLog::Open("/nonexistent-dir/access.log");
  ASSERT_FALSE(log.ok());
  EXPECT_NE(std::string(log.status().message()).find("cannot open access log /nonexistent-dir"),
            std::string::npos)
      << log.status();
}

// --- Through the router: every finished request, refusals too. ---

TEST_F(AccessLogFileTest, TheRouterWritesALinePerFinishedRequest) {
  engines::IoLoops loops(2);
  nt::FakeClock clock;
  nt::FakeEngineClient fake(&clock);
  prometheus::Registry registry;
  Metrics metrics(registry);
  Settings settings;
  settings.model = "m";
  settings.engines = {{"p0", "http://p0:8000", Role::kPrefill},
                      {"d0", "http://d0:8000", Role::kDecode}};
  auto log = AccessLog::Open(path_);
  ASSERT_TRUE(log.ok()) << log.status();
  Fleet fleet(settings, clock, &metrics);
  const server::StatusTableJournal table{};
  Router router(settings, fake, fleet, clock, &metrics, nullptr, 1, &table);
  router.SetAccessLog(log->get());

  Request r;
  r.rid = router.NewRequestId();
  r.body = {{"model", "m"}, {"prompt", kSecretPrompt}, {"max_tokens", 2}};
  r.arrived = clock.Now();
  r.deadline = r.arrived + engines::FromSeconds(30);
  auto sink = std::make_shared<nt::TestSink>();
  router.Submit(r, sink, loops.Next());
  nt::Chunk c;
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < until &&
         sink->Next(&c, 100ms) != nt::TestSink::Pop::kEnd) {
  }
  Outcome refused;
  refused.terminal = Terminal::kInvalid;
  refused.reason = Reason::kInvalidRequest;
  Request bad = r;
  bad.rid = "refused-1";
  router.RecordRefused(bad, refused);

  (*log)->Flush();
  const std::vector<json> lines = ReadLines(path_);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0]["rid"], r.rid);
  EXPECT_EQ(lines[0]["terminal"], "completed");
  EXPECT_EQ(lines[0]["prefill_iid"], "p0");
  EXPECT_EQ(lines[0]["decode_iid"], "d0");
  EXPECT_EQ(lines[0]["door"], "http");
  EXPECT_EQ(lines[1]["rid"], "refused-1");
  EXPECT_EQ(lines[1]["status"], 400);
  for (const json& line : lines) {
    EXPECT_EQ(line.dump().find(kSecretPrompt), std::string::npos) << line.dump();
  }
}

}  // namespace
}  // namespace narwhal::router
