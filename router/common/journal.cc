#include "router/common/journal.h"

#include <fcntl.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <utility>

#include "router/common/log.h"

namespace narwhal::router {
namespace {

// Serialized rows per write(2) when a batch is large.
constexpr size_t kChunkBytes = 1 << 20;
// How often the idle writer looks for refusal summaries that fell due.
constexpr auto kSummaryWake = std::chrono::seconds(1);

const engines::Clock& ClockOf(const JournalOptions& options) {
  static const engines::RealClock kRealClock;
  return options.clock != nullptr ? *options.clock : kRealClock;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Journal>> Journal::Open(const std::string& path,
                                                       JournalOptions options) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::InvalidArgumentError("cannot open " + options.name + " " + path + ": " +
                                      std::strerror(errno));
  }
  return std::unique_ptr<Journal>(new Journal(fd, std::move(options)));
}

Journal::Journal(int fd, JournalOptions options)
    : fd_(fd),
      options_(std::move(options)),
      clock_(ClockOf(options_)),
      limiter_(options_.refusal_rows_per_s) {
  writer_ = std::thread(&Journal::Run, this);
}

Journal::~Journal() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_one();
  writer_.join();  // the writer drains the queue before it returns
  ::close(fd_);
}

bool Journal::EnqueueLocked(nlohmann::json row) {
  if (accepted_ - completed_ >= options_.max_pending_rows) {
    ++dropped_;
    const bool first = !dropping_;
    dropping_ = true;
    return first;
  }
  queue_.push_back(std::move(row));
  ++accepted_;
  return false;
}

void Journal::QueueSummariesLocked(bool all) {
  if (!limiter_.pending()) return;
  for (nlohmann::json& summary : limiter_.TakeSummaries(clock_.Now(), clock_.WallNow(), all)) {
    EnqueueLocked(std::move(summary));
  }
}

void Journal::Write(nlohmann::json row) {
  bool wake = false;
  bool log_drop = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const size_t queued = queue_.size();
    QueueSummariesLocked(/*all=*/false);
    const bool write = options_.refusal_rows_per_s <= 0 ||
                       !RefusalRowLimiter::IsRefusalRow(row) ||
                       limiter_.Admit(row, clock_.Now(), clock_.WallNow());
    if (write) log_drop = EnqueueLocked(std::move(row));
    if (queue_.size() != queued || limiter_.pending()) {
      wake = writer_waiting_;  // to write the row, or to time the summary
      writer_waiting_ = false;
    }
  }
  if (wake) wake_.notify_one();
  if (log_drop) {
    LogWarning("narwhal " + options_.name + ": " + std::to_string(options_.max_pending_rows) +
               " rows are waiting to be written: dropping " + options_.name +
               " rows until the writer catches up");
  }
}

void Journal::Flush() {
  std::unique_lock<std::mutex> lock(mu_);
  QueueSummariesLocked(/*all=*/false);
  if (!queue_.empty() && writer_waiting_) {
    writer_waiting_ = false;
    wake_.notify_one();
  }
  const uint64_t target = accepted_;
  written_.wait(lock, [&] { return completed_ >= target; });
}

void Journal::Run() {
  std::vector<nlohmann::json> batch;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    while (queue_.empty() && !stopping_) {
      writer_waiting_ = true;
      if (limiter_.pending()) {
        // Counted refusals: their summary is due a second after the first.
        wake_.wait_for(lock, kSummaryWake);
        QueueSummariesLocked(/*all=*/false);
      } else {
        wake_.wait(lock);
      }
    }
    writer_waiting_ = false;
    if (stopping_) QueueSummariesLocked(/*all=*/true);  // no count is lost
    if (queue_.empty()) return;  // stopping, and everything is written
    batch.swap(queue_);
    const long long dropped_before = dropped_;
    lock.unlock();
    const size_t written = WriteBatch(batch);
    lock.lock();
    rows_ += static_cast<long long>(written);
    failed_ += static_cast<long long>(batch.size() - written);
    completed_ += batch.size();
    if (dropped_ == dropped_before) dropping_ = false;
    batch.clear();
    written_.notify_all();
  }
}

size_t Journal::WriteBatch(const std::vector<nlohmann::json>& batch) {
  size_t written = 0;
  size_t next = 0;
  std::string buf;
  std::vector<size_t> ends;  // offset just past each line in `buf`
  while (next < batch.size()) {
    buf.clear();
    ends.clear();
    // After a failed partial write the file may end mid-line: start afresh
    // so the rows that follow stay whole lines.
    if (mid_line_) buf.push_back('\n');
    while (next < batch.size() && (ends.empty() || buf.size() < kChunkBytes)) {
      buf += batch[next++].dump(-1, ' ', false,
                                nlohmann::json::error_handler_t::replace);  // never throws
      buf.push_back('\n');
      ends.push_back(buf.size());
    }
    int error = 0;
    const size_t n = WriteBuffer(buf, &error);
    if (n > 0) mid_line_ = buf[n - 1] != '\n';
    const size_t whole = std::upper_bound(ends.begin(), ends.end(), n) - ends.begin();
    written += whole;
    if (error == 0) {
      failing_ = false;
      continue;
    }
    // Disk full or similar: these rows are lost, requests are unaffected,
    // and the next chunk is still attempted.
    if (!failing_) {
      LogWarning("narwhal " + options_.name + ": write failed: " +
                 std::string(std::strerror(error)) + ": " + options_.name +
                 " rows are being lost");
    }
    failing_ = true;
  }
  return written;
}

size_t Journal::WriteBuffer(const std::string& buf, int* error) {
  size_t off = 0;
  while (off < buf.size()) {
    const ssize_t n = options_.write ? options_.write(fd_, buf.data() + off, buf.size() - off)
                                     : ::write(fd_, buf.data() + off, buf.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      *error = errno != 0 ? errno : EIO;
      return off;
    }
    if (n == 0) {  // no progress: give up on this chunk rather than spin
      *error = EIO;
      return off;
    }
    off += static_cast<size_t>(n);
  }
  return off;
}

long long Journal::rows() const {
  std::lock_guard<std::mutex> lock(mu_);
  return rows_;
}

long long Journal::accepted_rows() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<long long>(accepted_);
}

long long Journal::dropped_rows() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dropped_;
}

long long Journal::failed_rows() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failed_;
}

}  // namespace narwhal::router
