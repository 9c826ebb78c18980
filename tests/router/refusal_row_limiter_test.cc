// Refusal floods and the journal (router/common/refusal_row_limiter.h): rows
// of requests refused before any engine leg are written at most N a second
// per reason, the rest are counted into one `refusals_suppressed` row per
// reason and second; every other row is always written; no count is lost at
// shutdown. All on a FakeClock: no sleeps.
#include "router/common/refusal_row_limiter.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "router/common/journal.h"
#include "tests/fakes/fake_clock.h"

namespace narwhal::router {
namespace {

using json = nlohmann::json;
using ::narwhal::testing::FakeClock;
using namespace std::chrono_literals;

// A terminal row as Router::RecordRefused writes it (the fields that matter).
json RefusalRow(const std::string& reason, const std::string& terminal = "rejected",
                int attempts = 0) {
  static int n = 0;
  return {{"rid", "rid-" + std::to_string(++n)}, {"terminal", terminal},
          {"reason", reason},                     {"status", 429},
          {"attempts", attempts}};
}

TEST(RefusalRowLimiterTest, OnlyRowsRefusedBeforeAnyEngineLegAreRefusalRows) {
  EXPECT_TRUE(RefusalRowLimiter::IsRefusalRow(RefusalRow("inflight_limit")));
  EXPECT_TRUE(RefusalRowLimiter::IsRefusalRow(RefusalRow("malformed_http", "invalid")));
  // An engine's 400 reached the engine; completed and failed rows, event rows.
  EXPECT_FALSE(RefusalRowLimiter::IsRefusalRow(RefusalRow("engine_rejected", "invalid", 1)));
  EXPECT_FALSE(RefusalRowLimiter::IsRefusalRow(RefusalRow("", "completed", 1)));
  EXPECT_FALSE(RefusalRowLimiter::IsRefusalRow(RefusalRow("no_engine", "failed")));
  EXPECT_FALSE(RefusalRowLimiter::IsRefusalRow(RefusalRow("cancelled", "cancelled")));
  EXPECT_FALSE(RefusalRowLimiter::IsRefusalRow(json{{"event", "engine_ejected"}}));
  EXPECT_FALSE(RefusalRowLimiter::IsRefusalRow(json::array()));
}

TEST(RefusalRowLimiterTest, BucketPerReasonRefillsAndSummarisesOncePerSecond) {
  FakeClock clock;
  RefusalRowLimiter limiter(10);
  int written = 0;
  for (int i = 0; i < 25; ++i) written += limiter.Admit(RefusalRow("inflight_limit"), clock.Now(), 100.0);
  EXPECT_EQ(written, 10);  // the burst
  EXPECT_TRUE(limiter.pending());
  // Another reason has its own bucket.
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(limiter.Admit(RefusalRow("unauthorized"), clock.Now(), 100.0));
  // Other rows are never held back.
  EXPECT_TRUE(limiter.Admit(RefusalRow("", "completed", 1), clock.Now(), 100.0));

  clock.Advance(999ms);
  EXPECT_TRUE(limiter.TakeSummaries(clock.Now(), 100.999, false).empty());
  clock.Advance(1ms);
  const std::vector<json> summaries = limiter.TakeSummaries(clock.Now(), 101.0, false);
  ASSERT_EQ(summaries.size(), 1u);
  EXPECT_EQ(summaries[0], json({{"event", "refusals_suppressed"},
                                {"reason", "inflight_limit"},
                                {"count", 15},
                                {"first_at", 100.0},
                                {"at", 101.0}}));
  EXPECT_FALSE(limiter.pending());
  // A second later the bucket is full again (10 a second), no more.
  written = 0;
  for (int i = 0; i < 12; ++i) written += limiter.Admit(RefusalRow("inflight_limit"), clock.Now(), 101.0);
  EXPECT_EQ(written, 10);
  clock.Advance(500ms);
  written = 0;
  for (int i = 0; i < 12; ++i) written += limiter.Admit(RefusalRow("inflight_limit"), clock.Now(), 101.5);
  EXPECT_EQ(written, 5);
  // Shutdown takes every pending count, due or not.
  const std::vector<json> last = limiter.TakeSummaries(clock.Now(), 101.5, /*all=*/true);
  ASSERT_EQ(last.size(), 1u);
  EXPECT_EQ(last[0]["count"], 2 + 7);
  EXPECT_EQ(last[0]["first_at"], 101.0);
}

TEST(RefusalRowLimiterTest, ZeroRateWritesEveryRow) {
  FakeClock clock;
  RefusalRowLimiter limiter(0);
  for (int i = 0; i < 1000; ++i) EXPECT_TRUE(limiter.Admit(RefusalRow("inflight_limit"), clock.Now(), 1));
  EXPECT_FALSE(limiter.pending());
}

class RefusalJournalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char path[] = "/tmp/refusal_journal_XXXXXX";
    const int fd = mkstemp(path);
    ASSERT_GE(fd, 0);
    ::close(fd);
    path_ = path;
  }
  void TearDown() override {
    journal_.reset();
    std::remove(path_.c_str());
  }
  Journal& Open(double rows_per_s) {
    JournalOptions options;
    options.refusal_rows_per_s = rows_per_s;
    options.clock = &clock_;
    journal_ = Journal::Open(path_, std::move(options)).value();
    return *journal_;
  }
  std::vector<json> Rows() const {
    std::vector<json> rows;
    std::ifstream in(path_);
    for (std::string line; std::getline(in, line);) rows.push_back(json::parse(line));
    return rows;
  }

  FakeClock clock_;
  std::string path_;
  std::unique_ptr<Journal> journal_;
};

// A 429 flood of 250 rows in one instant, beside 20 framing refusals and
// ordinary rows: 100 429 rows, every other row, and one summary counting
// the 150 that were not written once a second has passed.
TEST_F(RefusalJournalTest, FloodBeyondTheRateBecomesOneSummaryRowPerReasonAndSecond) {
  Journal& journal = Open(100);
  for (int i = 0; i < 250; ++i) journal.Write(RefusalRow("inflight_limit"));
  for (int i = 0; i < 20; ++i) journal.Write(RefusalRow("malformed_http", "invalid"));
  for (int i = 0; i < 3; ++i) journal.Write(RefusalRow("", "completed", 1));
  journal.Flush();
  std::vector<json> rows = Rows();
  EXPECT_EQ(rows.size(), 123u);
  clock_.Advance(1s);
  journal.Flush();
  rows = Rows();
  ASSERT_EQ(rows.size(), 124u);
  EXPECT_EQ(rows.back()["event"], "refusals_suppressed");
  EXPECT_EQ(rows.back()["reason"], "inflight_limit");
  EXPECT_EQ(rows.back()["count"], 150);
  EXPECT_EQ(rows.back()["at"], clock_.WallNow());
  int refusals = 0;
  for (const json& row : rows) refusals += row.value("reason", "") == "inflight_limit" && row.contains("rid");
  EXPECT_EQ(refusals, 100);
}

// Counts pending at shutdown are written as summaries, due or not.
TEST_F(RefusalJournalTest, DestructorWritesThePendingSummaries) {
  Journal& journal = Open(5);
  for (int i = 0; i < 8; ++i) journal.Write(RefusalRow("unauthorized", "rejected"));
  journal_.reset();
  const std::vector<json> rows = Rows();
  ASSERT_EQ(rows.size(), 6u);
  EXPECT_EQ(rows.back()["event"], "refusals_suppressed");
  EXPECT_EQ(rows.back()["reason"], "unauthorized");
  EXPECT_EQ(rows.back()["count"], 3);
}

// The default: 100 rows per second per reason.
TEST_F(RefusalJournalTest, DefaultLimitIs100RowsPerSecondPerReason) {
  EXPECT_EQ(JournalOptions{}.refusal_rows_per_s, 100);
}

}  // namespace
}  // namespace narwhal::router
