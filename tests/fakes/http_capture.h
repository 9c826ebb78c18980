// A raw HTTP exchange captured for tests: status, headers, the body bytes as
// they arrived, and the SSE events in it. Built on httplib's streaming
// receiver, so it sees exactly what a server wrote, also when the server
// cuts the connection or falls silent.
#ifndef NARWHAL_TESTS_FAKES_HTTP_CAPTURE_H_
#define NARWHAL_TESTS_FAKES_HTTP_CAPTURE_H_

#include <httplib.h>

#include <functional>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace narwhal::testing {

struct HttpCapture {
  // Success, or how the exchange failed (Read: the server cut or fell
  // silent beyond the read timeout; Canceled: `hang_up` said so).
  httplib::Error error = httplib::Error::Success;
  int status = 0;  // 0 when no status line arrived
  httplib::Headers headers;
  std::string body;
  // The payload of each complete "data: ..." event, in order.
  std::vector<std::string> events;
  // Time from sending to the status line / to the first body byte
  // (InfiniteDuration when they never came) and to the end of the exchange.
  absl::Duration time_to_headers = absl::InfiniteDuration();
  absl::Duration time_to_first_byte = absl::InfiniteDuration();
  absl::Duration elapsed;

  bool saw_done() const;  // an event "[DONE]" arrived
  // Events that are neither [DONE] nor error frames, parsed as JSON objects
  // by the caller as needed.
  std::vector<std::string> data_events() const;
};

struct HttpCaptureOptions {
  httplib::Headers headers;
  // Idle bound of each read (httplib's read timeout).
  absl::Duration read_timeout = absl::Seconds(10);
  // Called after each received piece; returning true hangs up at once.
  std::function<bool(const HttpCapture&)> hang_up;
};

// POSTs `body` (application/json) to http://host:port<path>.
HttpCapture PostCapture(const std::string& host, int port,
                        const std::string& path, const std::string& body,
                        const HttpCaptureOptions& options = {});

}  // namespace narwhal::testing

#endif  // NARWHAL_TESTS_FAKES_HTTP_CAPTURE_H_
