// What one soak client request was and what its client saw, filled in by
// the HTTP and gRPC clients and judged by the contract check.
#ifndef NARWHAL_TESTS_SOAK_REQUEST_RECORD_H_
#define NARWHAL_TESTS_SOAK_REQUEST_RECORD_H_

#include <string>
#include <vector>

#include "absl/time/time.h"

namespace narwhal::soak {

enum class Door { kHttp, kGrpc };

struct RequestPlan {
  Door door = Door::kHttp;
  bool chat = false;    // chat completions (messages) or completions (prompt)
  bool stream = true;   // SSE / Generate, or a whole response / Complete
  int max_tokens = 16;
  std::string prompt;
  // Sent as X-Request-Id (HTTP) or request_id (gRPC): the journal keeps it
  // as client_rid, which ties every request to its row even when the client
  // went away before it saw any response header.
  std::string client_rid;
  // The client goes away this long after sending (InfiniteDuration: never).
  absl::Duration abort_after = absl::InfiniteDuration();
  int channel = 0;  // gRPC channel index
};

struct RequestRecord {
  RequestPlan plan;
  absl::Time sent;
  absl::Duration elapsed;
  // The client went away before the response ended.
  bool aborted = false;
  // The response ended as its framing says (HTTP: last chunk or
  // Content-Length; gRPC: a status from the server).
  bool complete = false;
  // Non-empty when the exchange failed on the wire (refused, cut, silent).
  std::string transport_error;

  std::string rid;       // x-request-id header / initial metadata
  int http_status = 0;   // HTTP status line; 0 when none arrived
  int grpc_code = -1;    // gRPC status code; -1 for HTTP requests
  // The error the client saw: the error body, the committed stream's
  // terminal event or the gRPC ErrorInfo.
  bool has_error = false;
  int error_code = 0;    // its code / http_status
  std::string error_type;
  std::string error_message;
  bool output_started = false;  // ErrorInfo.output_started

  int tokens = 0;          // token-carrying events / deltas / completion tokens
  // Generated text carried U+FFFD (engine text that was not valid Unicode,
  // repaired by the router: narwhal-sim's invalid_text fault).
  bool repaired_text = false;
  // Generated text that was not valid UTF-8 reached the client.
  bool invalid_utf8 = false;
  bool saw_done = false;   // SSE [DONE] / gRPC Final
  bool terminal_event = false;  // a committed stream ended with an error event
  // Shape problems the client itself saw (event after the end, ...).
  std::vector<std::string> problems;
};

}  // namespace narwhal::soak

#endif  // NARWHAL_TESTS_SOAK_REQUEST_RECORD_H_
