// The recent requests an engine received, for tests to inspect (GET
// /sim/requests): what was sent, what was answered and when the exchange
// ended. A bounded ring; thread-safe; pure (no I/O, times come from callers).
//
// How an exchange ended (`end`):
//   "complete"     the response was sent as planned (latency-only and
//                  descriptor-shaping faults included);
//   "fault"        an injected fault shaped the ending: drop_connection,
//                  http_status, close_before_done, done_before_token,
//                  error_in_stream, or a silence that reached max_silence_s;
//   "client_gone"  the client went away before the planned end (also during
//                  an injected silence: ended_at then tells how promptly the
//                  client hung up);
//   "error"        the engine answered an error of its own (validation 4xx,
//                  401, a failed KV load);
//   "stopped"      the engine stopped first;
//   null           still in progress.
#ifndef NARWHAL_ENGINES_SIM_REQUEST_LOG_H_
#define NARWHAL_ENGINES_SIM_REQUEST_LOG_H_

#include <cstdint>
#include <deque>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "nlohmann/json.hpp"

namespace narwhal::sim {

enum class RequestEnd { kOpen, kComplete, kFault, kClientGone, kError, kStopped };

absl::string_view RequestEndName(RequestEnd end);  // "" for kOpen

struct RequestRecord {
  uint64_t seq = 0;  // assigned by RequestLog::Add, from 1
  double at = 0;     // arrival, unix seconds
  std::string method;
  std::string path;
  std::string phase;                                  // "prefill" | "decode"; empty = not inference
  nlohmann::json headers = nlohmann::json::object();  // lower-case names
  nlohmann::json body;  // parsed JSON, the raw text, or null when empty
                        // or not kept
  size_t body_bytes = 0;
  bool body_truncated = false;  // too large to keep
  int status = 0;               // HTTP status sent; 0 = none (yet)
  std::string fault;            // kind of the fault that fired; empty = none
  double ended_at = 0;          // 0 while open
  RequestEnd end = RequestEnd::kOpen;
  int tokens_sent = 0;
  // The client's port: requests with one peer_port came over one
  // connection (how tests count connections, and so TLS handshakes).
  int peer_port = 0;

  // {"seq", "at", "method", "path", "phase", "headers", "body",
  //  "body_bytes", "body_truncated", "status", "fault", "ended_at", "end",
  //  "tokens_sent", "peer_port"}; empty strings and zero times/statuses are
  //  null.
  nlohmann::json ToJson() const;
};

class RequestLog {
 public:
  static constexpr size_t kDefaultCapacity = 2000;

  explicit RequestLog(size_t capacity = kDefaultCapacity);

  // Stores the record (evicting the oldest when full); returns its seq.
  uint64_t Add(RequestRecord record);
  // Applies `update` to the record `seq` if it is still held.
  void Update(uint64_t seq, absl::FunctionRef<void(RequestRecord&)> update);
  // Ends the record: the first call wins, later ones are ignored.
  void End(uint64_t seq, RequestEnd end, double at);
  void Clear();
  // {"requests": [record, ...]}, oldest first.
  nlohmann::json ToJson() const;

 private:
  RequestRecord* FindLocked(uint64_t seq) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const size_t capacity_;
  mutable absl::Mutex mu_;
  std::deque<RequestRecord> records_ ABSL_GUARDED_BY(mu_);
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace narwhal::sim

#endif  // NARWHAL_ENGINES_SIM_REQUEST_LOG_H_
