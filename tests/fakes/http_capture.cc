#include "tests/fakes/http_capture.h"

#include "absl/time/clock.h"

namespace narwhal::testing {
namespace {

void SplitEvents(HttpCapture* capture, size_t* parsed) {
  for (;;) {
    const size_t end = capture->body.find("\n\n", *parsed);
    if (end == std::string::npos) return;
    const std::string event = capture->body.substr(*parsed, end - *parsed);
    *parsed = end + 2;
    if (event.rfind("data: ", 0) == 0) capture->events.push_back(event.substr(6));
  }
}

}  // namespace

bool HttpCapture::saw_done() const {
  for (const std::string& event : events) {
    if (event == "[DONE]") return true;
  }
  return false;
}

std::vector<std::string> HttpCapture::data_events() const {
  std::vector<std::string> out;
  for (const std::string& event : events) {
    if (event != "[DONE]" && event.rfind("{\"error\"", 0) != 0) {
      out.push_back(event);
    }
  }
  return out;
}

HttpCapture PostCapture(const std::string& host, int port,
                        const std::string& path, const std::string& body,
                        const HttpCaptureOptions& options) {
  HttpCapture capture;
  httplib::Client client(host, port);
  client.set_connection_timeout(std::chrono::seconds(5));
  client.set_read_timeout(absl::ToChronoMicroseconds(options.read_timeout));
  client.set_write_timeout(std::chrono::seconds(5));
  client.set_keep_alive(false);

  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = body;
  req.headers = options.headers;
  if (req.headers.find("Content-Type") == req.headers.end()) {
    req.headers.emplace("Content-Type", "application/json");
  }
  const absl::Time start = absl::Now();
  size_t parsed = 0;
  req.response_handler = [&](const httplib::Response& res) {
    capture.status = res.status;
    capture.headers = res.headers;
    capture.time_to_headers = absl::Now() - start;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t size, uint64_t,
                             uint64_t) {
    if (capture.body.empty() && size > 0) {
      capture.time_to_first_byte = absl::Now() - start;
    }
    capture.body.append(data, size);
    SplitEvents(&capture, &parsed);
    return !(options.hang_up && options.hang_up(capture));
  };
  httplib::Result result = client.send(req);
  capture.error = result.error();
  capture.elapsed = absl::Now() - start;
  return capture;
}

}  // namespace narwhal::testing
