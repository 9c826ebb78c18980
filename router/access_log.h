// AccessLog: one JSON line per finished client request (narwhal-serve
// --access-log PATH|-), for operators who tail or ship request logs without
// enabling the journal. Off unless configured.
//
// A line holds what identifies and measures the request, never its content
// (no prompt, messages or output text):
//   {"ts":"2026-11-30T09:00:00.123Z","rid":"...","client_rid":null,
//    "door":"http","api":"completions","model":"...","stream":true,
//    "status":200,"terminal":"completed","reason":null,
//    "prefill_iid":"p0","decode_iid":"d1","attempts":1,
//    "ttft_s":0.012,"first_byte_s":0.015,"duration_s":0.210,
//    "prompt_tokens":12,"output_tokens":64}
// `ts` is when the request finished (UTC); `status` is the journal's (the
// server's status table through JournalStatus, router/outcome.h): null for
// a client that went away before any answer was sent, and null when no
// table was given.
//
// Never slows the data plane: Record() builds the line and hands it to a
// bounded queue written by the log's own thread (router/common/journal.h's
// writer). When `max_pending_lines` are waiting, further lines are dropped
// and counted (dropped()), with one warning per run of drops.
#ifndef NARWHAL_ROUTER_ACCESS_LOG_H_
#define NARWHAL_ROUTER_ACCESS_LOG_H_

#include <absl/status/statusor.h>
#include <sys/types.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "router/common/journal.h"
#include "router/journal_row.h"
#include "router/outcome.h"
#include "router/request.h"

namespace narwhal::router {

struct AccessLogOptions {
  // Lines accepted but not yet written beyond which Record() drops lines.
  size_t max_pending_lines = 10000;
  // The write(2) seam for tests; empty means ::write.
  std::function<ssize_t(int fd, const void* data, size_t size)> write;
};

class AccessLog {
 public:
  // `path` is a file (appended to, created 0644) or "-" for stdout.
  static absl::StatusOr<std::unique_ptr<AccessLog>> Open(const std::string& path,
                                                         AccessLogOptions options = {});

  // The line for a finished request (pure; exposed for tests).
  static nlohmann::json Line(const Request& request, const Outcome& outcome,
                             const RequestRecord& record, double duration_s, double finished_wall,
                             const JournalStatus* status);

  // Queues the request's line and returns at once (drops it when full).
  void Record(const Request& request, const Outcome& outcome, const RequestRecord& record,
              double duration_s, double finished_wall, const JournalStatus* status);
  // Until every line recorded before this call is written.
  void Flush() { writer_->Flush(); }

  long long lines() const { return writer_->rows(); }
  long long dropped() const { return writer_->dropped_rows(); }

 private:
  explicit AccessLog(std::unique_ptr<Journal> writer) : writer_(std::move(writer)) {}
  std::unique_ptr<Journal> writer_;
};

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_ACCESS_LOG_H_
