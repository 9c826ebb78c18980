// Journal: one JSONL row per finished client request, plus event rows
// (SPEC §9).
//
// Threading: Write() does no journal I/O. It moves the row into an in-memory
// FIFO queue and returns; the caller may be a request's event-loop thread or
// a control-plane thread. One writer thread per Journal serializes the rows
// (nlohmann dump with invalid UTF-8 replaced, so it never throws) and writes
// everything queued at each wake as one write(2) of whole lines (large
// batches in chunks of about 1 MiB), continuing after a partial write and
// retrying EINTR. Rows keep the order in which Write() accepted them, and the
// file is opened with O_APPEND, so lines are never interleaved.
//
// Bound and drop policy: at most `max_pending_rows` rows (default 100000)
// may be accepted and not yet written, counting the batch being written.
// Write() on a full queue drops the row and counts it (dropped_rows()); the
// caller is never blocked. The first drop after a period without drops (a
// batch completed with no drop during it) writes one line to stderr from the
// dropping thread, so it is seen even when the writer is stuck. A write
// error (disk full, ...) loses the rows of that chunk (failed_rows(), logged
// once per run of errors); later rows are still written, on a fresh line.
//
// Refusal floods (RefusalRowLimiter): rows of requests refused before any
// engine leg are written at most `refusal_rows_per_s` a second per reason;
// past that they are counted into one `refusals_suppressed` row per reason
// and second, queued by the next Write(), Flush() or the writer's own wake
// (it wakes every second while counts are pending), and at the latest by
// the destructor.
//
// Shutdown durability: Flush() blocks until every row accepted before the
// call has been written (or failed). The destructor drains the queue, joins
// the writer thread and then closes the file, so every row accepted before
// destruction is in the file (the kernel's page cache) when it returns.
//
// Thread-safe, except that no Write() may race with the destructor.
#ifndef NARWHAL_ROUTER_COMMON_JOURNAL_H_
#define NARWHAL_ROUTER_COMMON_JOURNAL_H_

#include <sys/types.h>

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <absl/status/statusor.h>
#include <nlohmann/json.hpp>

#include "router/common/clock.h"
#include "router/common/refusal_row_limiter.h"

namespace narwhal::router {

struct JournalOptions {
  // Rows accepted but not yet written (queued, or in the batch being
  // written) beyond which Write() drops rows.
  size_t max_pending_rows = 100000;
  // The write(2) the writer thread calls; empty means ::write. A seam for
  // tests (slow, failing or partial writes).
  std::function<ssize_t(int fd, const void* data, size_t size)> write;
  // What the log lines about this writer call it.
  std::string name = "journal";
  // Refusal rows per second per reason before they are only counted
  // (router/common/refusal_row_limiter.h); 0: no limit.
  double refusal_rows_per_s = 100;
  // The clock of that limit and of the summary rows' `at`; null: the real
  // clock. Must outlive the journal.
  const engines::Clock* clock = nullptr;
};

class Journal {
 public:
  static absl::StatusOr<std::unique_ptr<Journal>> Open(const std::string& path,
                                                       JournalOptions options = {});
  // Drains the queue, joins the writer thread, closes the file.
  ~Journal();
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;

  // Queues `row` (pass an rvalue to avoid a copy) and returns at once.
  void Write(nlohmann::json row);
  // Until every row accepted before this call is written or has failed.
  void Flush();

  // Rows written to the file so far by this process.
  long long rows() const;
  // Rows accepted by Write() (written, failed or still queued).
  long long accepted_rows() const;
  // Rows Write() dropped because the queue was full.
  long long dropped_rows() const;
  // Rows lost to write errors.
  long long failed_rows() const;

 private:
  Journal(int fd, JournalOptions options);
  void Run();  // the writer thread
  // Writes `batch` (writer thread, without mu_); returns the rows written.
  size_t WriteBatch(const std::vector<nlohmann::json>& batch);
  // Writes all of `buf`; returns the bytes written before an error, if any.
  size_t WriteBuffer(const std::string& buf, int* error);
  // Queues `row` unless the queue is full (then counts the drop and returns
  // whether it is the first of a run, to be logged). Under mu_.
  bool EnqueueLocked(nlohmann::json row);
  // Queues the refusal summaries due now (every pending one with `all`).
  // Under mu_.
  void QueueSummariesLocked(bool all);

  const int fd_;
  const JournalOptions options_;
  const engines::Clock& clock_;

  mutable std::mutex mu_;
  std::condition_variable wake_;     // the writer: rows queued or stopping
  std::condition_variable written_;  // Flush(): completed_ advanced
  std::vector<nlohmann::json> queue_;
  bool writer_waiting_ = false;
  bool stopping_ = false;
  bool dropping_ = false;  // a drop was logged; no batch has since completed drop-free
  RefusalRowLimiter limiter_;
  uint64_t accepted_ = 0;
  uint64_t completed_ = 0;  // accepted rows written or failed, in order
  long long rows_ = 0;
  long long dropped_ = 0;
  long long failed_ = 0;

  // Writer-thread state.
  bool failing_ = false;   // the last chunk hit an error (logged)
  bool mid_line_ = false;  // the file may end in a partial line
  std::thread writer_;     // last: starts after everything above
};

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_COMMON_JOURNAL_H_
