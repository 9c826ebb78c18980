// ProcessMetrics' /proc/<pid>/stat parsing, on fixed text and on this
// process.
#include "server/process_metrics.h"

#include <gtest/gtest.h>

#include <ctime>

namespace narwhal::server {
namespace {

TEST(ProcessMetricsTest, ParsesStatFieldsAfterACommandWithSpacesAndParentheses) {
  // pid (comm) state ppid ... utime(14)=250 stime(15)=150 ... starttime(22)=1000
  // vsize(23)=81920000 rss(24)=2000
  const std::string stat =
      "4242 (narwhal (x) y) S 1 4242 4242 0 -1 4194304 100 0 0 0 250 150 0 0 20 0 9 0 1000 "
      "81920000 2000 18446744073709551615 1 1 0 0 0 0 0 4096 0 0 0 17 1 0 0 0 0 0";
  const ProcessSample s = ParseProcStat(stat, 100, 4096, 1.7e9);
  ASSERT_TRUE(s.cpu_seconds && s.resident_bytes && s.virtual_bytes && s.start_time_seconds);
  EXPECT_DOUBLE_EQ(*s.cpu_seconds, 4.0);
  EXPECT_DOUBLE_EQ(*s.resident_bytes, 2000.0 * 4096);
  EXPECT_DOUBLE_EQ(*s.virtual_bytes, 81920000.0);
  EXPECT_DOUBLE_EQ(*s.start_time_seconds, 1.7e9 + 10);
}

TEST(ProcessMetricsTest, GarbageYieldsNoValues) {
  const ProcessSample s = ParseProcStat("no parenthesis here", 100, 4096, 1.7e9);
  EXPECT_FALSE(s.cpu_seconds || s.resident_bytes || s.start_time_seconds);
  const ProcessSample cut = ParseProcStat("1 (x) S 1 2", 100, 4096, 1.7e9);
  EXPECT_FALSE(cut.cpu_seconds || cut.resident_bytes);
}

TEST(ProcessMetricsTest, ReadsThisProcess) {
  const ProcessSample s = ReadProcessSample();
  ASSERT_TRUE(s.resident_bytes && s.open_fds && s.start_time_seconds && s.max_fds);
  EXPECT_GT(*s.resident_bytes, 0);
  EXPECT_GE(*s.open_fds, 3);  // stdin, stdout, stderr
  EXPECT_LE(*s.start_time_seconds, static_cast<double>(std::time(nullptr)) + 1);
  EXPECT_GT(*s.start_time_seconds, static_cast<double>(std::time(nullptr)) - 3600);
}

}  // namespace
}  // namespace narwhal::server
