// Journal: rows are queued by Write() and written by the journal's own writer
// thread, in order and as whole lines; a full queue drops and counts rows;
// Flush() and the destructor drain; write errors are survived. The writer is
// held or failed through the write seam or a FIFO nobody reads — no sleeps.
#include "router/common/journal.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace narwhal::router {
namespace {

using json = nlohmann::json;

std::vector<std::string> Lines(const std::string& path) {
  std::vector<std::string> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

int Count(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// A write seam that passes calls on to ::write but holds them while closed,
// and records which threads called it.
class Gate {
 public:
  JournalOptions Options(size_t max_pending_rows = 100000) {
    JournalOptions options;
    options.max_pending_rows = max_pending_rows;
    options.write = [this](int fd, const void* data, size_t size) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        threads_.push_back(std::this_thread::get_id());
        ++held_;
        cv_.notify_all();
        cv_.wait(lock, [&] { return open_; });
        --held_;
      }
      return ::write(fd, data, size);
    };
    return options;
  }
  void Set(bool open) {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = open;
    cv_.notify_all();
  }
  // Until the writer is inside a held call.
  void WaitHeld() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return held_ > 0; });
  }
  std::vector<std::thread::id> threads() {
    std::lock_guard<std::mutex> lock(mu_);
    return threads_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = true;
  int held_ = 0;
  std::vector<std::thread::id> threads_;
};

class JournalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = ::testing::TempDir() + "journal_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name() + "_" +
            std::to_string(::getpid());
    std::remove(path_.c_str());
  }
  void TearDown() override {
    journal_.reset();
    std::remove(path_.c_str());
  }
  // The journal at `path`; a failure to open throws, failing the test.
  Journal& Open(JournalOptions options = {}, const std::string& path = "") {
    journal_ = Journal::Open(path.empty() ? path_ : path, std::move(options)).value();
    return *journal_;
  }

  std::string path_;
  std::unique_ptr<Journal> journal_;
};

TEST_F(JournalTest, RowsAreWrittenWholeAndInOrderAfterFlush) {
  Journal& journal = Open();
  constexpr int kRows = 500;
  for (int i = 0; i < kRows; ++i) {
    json row = {{"i", i}, {"text", std::string(i % 7 * 100, 'x')}};
    if (i == 3) row["bad"] = "not utf-8: \xff\xfe";  // replaced, never throws
    journal.Write(std::move(row));
  }
  const json kept = {{"i", kRows}};
  journal.Write(kept);  // an lvalue is copied
  journal.Flush();
  EXPECT_EQ(journal.rows(), kRows + 1);
  EXPECT_EQ(journal.accepted_rows(), kRows + 1);
  EXPECT_EQ(journal.dropped_rows(), 0);
  const std::vector<std::string> lines = Lines(path_);
  ASSERT_EQ(lines.size(), static_cast<size_t>(kRows + 1));
  for (int i = 0; i <= kRows; ++i) {
    const json row = json::parse(lines[i], nullptr, false);
    ASSERT_TRUE(row.is_object()) << "line " << i << ": " << lines[i];
    EXPECT_EQ(row["i"], i);
  }
  EXPECT_EQ(json::parse(lines[3])["bad"], "not utf-8: \xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST_F(JournalTest, WritesHappenOnTheWriterThreadOneCallPerBatch) {
  Gate gate;
  Journal& journal = Open(gate.Options());
  gate.Set(false);
  journal.Write(json{{"i", 0}});
  gate.WaitHeld();  // the writer holds row 0: rows 1..99 queue up behind it
  for (int i = 1; i < 100; ++i) journal.Write(json{{"i", i}});
  EXPECT_EQ(journal.rows(), 0);  // Write() returned without writing
  EXPECT_EQ(journal.accepted_rows(), 100);
  gate.Set(true);
  journal.Flush();
  EXPECT_EQ(journal.rows(), 100);
  const std::vector<std::thread::id> threads = gate.threads();
  ASSERT_EQ(threads.size(), 2u) << "row 0, then rows 1..99 in one write";
  for (const std::thread::id& id : threads) EXPECT_NE(id, std::this_thread::get_id());
  const std::vector<std::string> lines = Lines(path_);
  ASSERT_EQ(lines.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(json::parse(lines[i])["i"], i);
}

TEST_F(JournalTest, ConcurrentWritersGiveEveryRowExactlyOnce) {
  Journal& journal = Open();
  constexpr int kThreads = 8;
  constexpr int kPerThread = 2000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int n = 0; n < kPerThread; ++n) {
        journal.Write(json{{"t", t}, {"n", n}, {"pad", std::string(n % 300, 'p')}});
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  journal.Flush();
  EXPECT_EQ(journal.dropped_rows(), 0);
  EXPECT_EQ(journal.rows(), kThreads * kPerThread);
  std::set<std::pair<int, int>> seen;
  std::vector<int> last(kThreads, -1);
  for (const std::string& line : Lines(path_)) {
    const json row = json::parse(line, nullptr, false);
    ASSERT_TRUE(row.is_object()) << line;
    const int t = row["t"];
    const int n = row["n"];
    EXPECT_TRUE(seen.emplace(t, n).second) << "twice: " << line;
    EXPECT_GT(n, last[t]) << "out of order: " << line;  // each thread's rows keep their order
    last[t] = n;
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(kThreads * kPerThread));
}

TEST_F(JournalTest, DestructorDrainsTheQueue) {
  Gate gate;
  Journal& journal = Open(gate.Options());
  constexpr int kRows = 1000;
  gate.Set(false);
  journal.Write(json{{"i", 0}});
  gate.WaitHeld();  // everything after row 0 is still queued
  for (int i = 1; i < kRows; ++i) journal.Write(json{{"i", i}});
  ASSERT_EQ(journal.rows(), 0);
  // The writer is let go only once destruction has begun.
  std::atomic<bool> destroying{false};
  std::thread opener([&] {
    while (!destroying) std::this_thread::yield();
    gate.Set(true);
  });
  destroying = true;
  journal_.reset();
  opener.join();
  const std::vector<std::string> lines = Lines(path_);
  ASSERT_EQ(lines.size(), static_cast<size_t>(kRows));
  for (int i = 0; i < kRows; ++i) EXPECT_EQ(json::parse(lines[i])["i"], i);
}

TEST_F(JournalTest, FullQueueDropsAndCountsAndLogsOncePerEpisode) {
  Gate gate;
  Journal& journal = Open(gate.Options(/*max_pending_rows=*/2));
  ::testing::internal::CaptureStderr();
  gate.Set(false);
  journal.Write(json{{"i", 0}});
  gate.WaitHeld();
  journal.Write(json{{"i", 1}});  // 2 pending: row 0 being written, row 1 queued
  journal.Write(json{{"i", 2}});  // dropped, without blocking
  journal.Write(json{{"i", 3}});  // dropped
  EXPECT_EQ(journal.dropped_rows(), 2);
  EXPECT_EQ(journal.accepted_rows(), 2);
  gate.Set(true);
  journal.Flush();  // row 1's batch completes without a drop: the episode ends
  gate.Set(false);
  journal.Write(json{{"i", 4}});
  gate.WaitHeld();
  journal.Write(json{{"i", 5}});
  journal.Write(json{{"i", 6}});  // dropped: a new episode, logged again
  EXPECT_EQ(journal.dropped_rows(), 3);
  gate.Set(true);
  journal.Flush();
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(Count(log, "dropping journal rows"), 2) << log;
  std::vector<int> written;
  for (const std::string& line : Lines(path_)) written.push_back(json::parse(line)["i"]);
  EXPECT_EQ(written, (std::vector<int>{0, 1, 4, 5}));
}

TEST_F(JournalTest, WriterBlockedOnAPipeNobodyReadsNeverBlocksWrite) {
  ASSERT_EQ(::mkfifo(path_.c_str(), 0600), 0) << std::strerror(errno);
  const int reader = ::open(path_.c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(reader, 0);
  JournalOptions options;
  options.max_pending_rows = 4;
  Journal& journal = Open(std::move(options));
  // A row twice the pipe's capacity: its write(2) blocks until someone reads.
  const int capacity = ::fcntl(reader, F_GETPIPE_SZ);
  ASSERT_GT(capacity, 0);
  ::testing::internal::CaptureStderr();
  journal.Write(json{{"i", 0}, {"big", std::string(2 * capacity, 'b')}});
  for (int i = 1; i < 14; ++i) journal.Write(json{{"i", i}});
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(journal.accepted_rows(), 4);
  EXPECT_EQ(journal.dropped_rows(), 10);
  EXPECT_EQ(journal.rows(), 0);
  EXPECT_EQ(Count(log, "dropping journal rows"), 1) << log;
  // Now drain the pipe; destruction writes the 4 accepted rows and closes it.
  ASSERT_EQ(::fcntl(reader, F_SETFL, 0), 0);
  std::string received;
  std::thread drain([&] {
    char buf[65536];
    for (ssize_t n; (n = ::read(reader, buf, sizeof(buf))) != 0;) {
      if (n > 0) received.append(buf, static_cast<size_t>(n));
      if (n < 0 && errno != EINTR) break;
    }
  });
  journal_.reset();
  drain.join();
  ::close(reader);
  std::vector<int> written;
  for (size_t at = 0, end; (end = received.find('\n', at)) != std::string::npos; at = end + 1) {
    written.push_back(json::parse(received.substr(at, end - at))["i"]);
  }
  EXPECT_EQ(written, (std::vector<int>{0, 1, 2, 3}));
}

TEST_F(JournalTest, WriteErrorsNeitherCrashNorHang) {
  Journal& journal = Open({}, "/dev/full");
  ::testing::internal::CaptureStderr();
  journal.Write(json{{"i", 0}});
  journal.Flush();
  EXPECT_EQ(journal.failed_rows(), 1);
  journal.Write(json{{"i", 1}});
  journal.Write(json{{"i", 2}});
  journal.Flush();  // later rows are attempted (and fail again)
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(journal.failed_rows(), 3);
  EXPECT_EQ(journal.rows(), 0);
  EXPECT_EQ(Count(log, "write failed"), 1) << log;
  journal_.reset();  // no hang on shutdown either
}

TEST_F(JournalTest, PartialWritesEintrAndErrorsKeepLaterLinesWhole) {
  // Writes at most 5 bytes a call, interrupted every third call; `fail_after`
  // (when >= 0) ends the next call after that many bytes with EIO.
  int calls = 0;
  int fail_after = -1;
  JournalOptions options;
  options.write = [&](int fd, const void* data, size_t size) -> ssize_t {
    if (++calls % 3 == 0) {
      errno = EINTR;
      return -1;
    }
    if (fail_after == 0) {
      fail_after = -1;
      errno = EIO;
      return -1;
    }
    size_t n = std::min<size_t>(size, 5);
    if (fail_after > 0) n = std::min<size_t>(n, static_cast<size_t>(fail_after));
    if (fail_after > 0) fail_after -= static_cast<int>(n);
    return ::write(fd, data, n);
  };
  ::testing::internal::CaptureStderr();
  Journal& journal = Open(std::move(options));
  journal.Write(json{{"row", "first"}});
  journal.Flush();
  fail_after = 4;  // the second row gets 4 bytes out, then an error
  journal.Write(json{{"row", "second"}});
  journal.Flush();
  EXPECT_EQ(journal.failed_rows(), 1);
  journal.Write(json{{"row", "third"}});
  journal.Flush();
  EXPECT_EQ(journal.rows(), 2);
  journal_.reset();
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(Count(log, "write failed"), 1) << log;
  EXPECT_EQ(Lines(path_),
            (std::vector<std::string>{R"({"row":"first"})", R"({"ro)", R"({"row":"third"})"}));
}

}  // namespace
}  // namespace narwhal::router
