#include "tests/soak/http_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "nlohmann/json.hpp"
#include "tests/soak/text_check.h"

namespace narwhal::soak {
namespace {

using json = nlohmann::json;

// Incremental HTTP/1.1 response reader: head, then a chunked, sized or
// read-to-close body, decoded as it arrives.
class ResponseReader {
 public:
  // Feeds received bytes; false on a framing error (set in error()).
  bool Feed(const char* data, size_t n) {
    raw_.append(data, n);
    if (!head_done_ && !ParseHead()) return error_.empty();
    if (head_done_) ParseBody();
    return error_.empty();
  }
  // The peer closed the connection.
  void Eof() {
    if (head_done_ && mode_ == Mode::kUntilClose) done_ = true;
  }
  bool head_done() const { return head_done_; }
  bool done() const { return done_; }
  const std::string& error() const { return error_; }
  int status() const { return status_; }
  std::string header(const std::string& lower_name) const {
    auto it = headers_.find(lower_name);
    return it == headers_.end() ? "" : it->second;
  }
  const std::string& body() const { return body_; }

 private:
  enum class Mode { kChunked, kSized, kUntilClose };
  enum class Chunk { kSize, kData, kDataEnd, kTrailer };

  bool ParseHead() {
    const size_t end = raw_.find("\r\n\r\n");
    if (end == std::string::npos) {
      if (raw_.size() > 65536) error_ = "response head over 64 KiB";
      return false;
    }
    std::vector<std::string> lines = absl::StrSplit(raw_.substr(0, end), "\r\n");
    std::vector<std::string> status_line = absl::StrSplit(lines[0], ' ');
    if (status_line.size() < 2 || !absl::SimpleAtoi(status_line[1], &status_)) {
      error_ = absl::StrCat("bad status line: ", lines[0]);
      return false;
    }
    for (size_t i = 1; i < lines.size(); ++i) {
      const size_t colon = lines[i].find(':');
      if (colon == std::string::npos) continue;
      headers_[absl::AsciiStrToLower(lines[i].substr(0, colon))] =
          std::string(absl::StripAsciiWhitespace(lines[i].substr(colon + 1)));
    }
    raw_.erase(0, end + 4);
    head_done_ = true;
    if (absl::AsciiStrToLower(header("transfer-encoding")).find("chunked") != std::string::npos) {
      mode_ = Mode::kChunked;
    } else if (!header("content-length").empty()) {
      mode_ = Mode::kSized;
      if (!absl::SimpleAtoi(header("content-length"), &remaining_)) {
        error_ = "bad Content-Length";
        return false;
      }
    }
    return true;
  }

  void ParseBody() {
    if (mode_ == Mode::kUntilClose) {
      body_ += raw_;
      raw_.clear();
      return;
    }
    if (mode_ == Mode::kSized) {
      const size_t take = std::min<size_t>(raw_.size(), remaining_);
      body_.append(raw_, 0, take);
      raw_.erase(0, take);
      remaining_ -= take;
      done_ = remaining_ == 0;
      return;
    }
    while (!done_ && error_.empty()) {
      if (chunk_ == Chunk::kData) {
        const size_t take = std::min<size_t>(raw_.size(), remaining_);
        body_.append(raw_, 0, take);
        raw_.erase(0, take);
        remaining_ -= take;
        if (remaining_ > 0) return;
        chunk_ = Chunk::kDataEnd;
        continue;
      }
      const size_t eol = raw_.find("\r\n");
      if (eol == std::string::npos) return;
      const std::string line = raw_.substr(0, eol);
      raw_.erase(0, eol + 2);
      if (chunk_ == Chunk::kDataEnd) {
        if (!line.empty()) error_ = "chunk data not followed by CRLF";
        chunk_ = Chunk::kSize;
      } else if (chunk_ == Chunk::kSize) {
        const std::string size = line.substr(0, line.find(';'));
        if (!absl::SimpleHexAtoi(absl::StripAsciiWhitespace(size), &remaining_)) {
          error_ = absl::StrCat("bad chunk size line: ", line);
        } else {
          chunk_ = remaining_ == 0 ? Chunk::kTrailer : Chunk::kData;
        }
      } else if (line.empty()) {  // kTrailer: the blank line ends the message
        done_ = true;
      }
    }
  }

  std::string raw_;
  bool head_done_ = false;
  bool done_ = false;
  std::string error_;
  int status_ = 0;
  std::map<std::string, std::string> headers_;
  Mode mode_ = Mode::kUntilClose;
  Chunk chunk_ = Chunk::kSize;
  uint64_t remaining_ = 0;
  std::string body_;
};

std::string RequestBody(const RequestPlan& plan) {
  json body = {{"model", "Qwen/Qwen3-0.6B"},
               {"max_tokens", plan.max_tokens},
               {"stream", plan.stream}};
  if (plan.chat) {
    body["messages"] = json::array({{{"role", "user"}, {"content", plan.prompt}}});
  } else {
    body["prompt"] = plan.prompt;
  }
  return body.dump();
}

int Connect(int port, std::string* error) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *error = absl::StrCat("socket: ", std::strerror(errno));
    return -1;
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    *error = absl::StrCat("connect: ", std::strerror(errno));
    close(fd);
    return -1;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

bool SendAll(int fd, const std::string& data) {
  size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

// The choice-0 text of a completions or chat chunk / response.
std::string ChoiceText(const json& doc) {
  if (!doc.is_object() || !doc.contains("choices") || !doc["choices"].is_array() ||
      doc["choices"].empty()) {
    return "";
  }
  const json& c = doc["choices"][0];
  if (c.contains("text") && c["text"].is_string()) return c["text"].get<std::string>();
  for (const char* holder : {"delta", "message"}) {
    if (c.contains(holder) && c[holder].is_object() && c[holder].contains("content") &&
        c[holder]["content"].is_string()) {
      return c[holder]["content"].get<std::string>();
    }
  }
  return "";
}

void TakeError(const json& error, RequestRecord* r) {
  r->has_error = true;
  r->error_code = error.value("code", json()).is_number_integer() ? error["code"].get<int>() : 0;
  r->error_type = error.value("type", json()).is_string() ? error["type"].get<std::string>() : "";
  r->error_message =
      error.value("message", json()).is_string() ? error["message"].get<std::string>() : "";
}

// Judges an SSE body: events in order, one end ([DONE] or an error event).
void ReadStream(const std::string& body, bool complete, RequestRecord* r) {
  bool ended = false;
  for (absl::string_view event : absl::StrSplit(body, "\n\n", absl::SkipEmpty())) {
    const bool partial =
        !absl::EndsWith(body, "\n\n") && event.data() + event.size() == body.data() + body.size();
    if (partial) break;  // cut off mid-event (abort or a cut stream)
    std::string data;
    for (absl::string_view line : absl::StrSplit(event, '\n')) {
      if (absl::ConsumePrefix(&line, "data:")) {
        absl::ConsumePrefix(&line, " ");
        absl::StrAppend(&data, line);
      }
    }
    if (data.empty()) continue;  // comments, keep-alives
    if (ended) {
      r->problems.push_back(absl::StrCat("event after the end of the stream: ", data));
      continue;
    }
    if (data == "[DONE]") {
      r->saw_done = true;
      ended = true;
      continue;
    }
    if (!WellFormedUtf8(data)) r->invalid_utf8 = true;
    const json doc = json::parse(data, nullptr, false);
    if (doc.is_object() && doc.contains("error") && doc["error"].is_object()) {
      TakeError(doc["error"], r);
      r->terminal_event = true;
      ended = true;
      continue;
    }
    const std::string text = ChoiceText(doc);
    CheckText(text, r);
    if (!text.empty()) ++r->tokens;
  }
  if (complete && !ended) {
    r->problems.push_back("stream ended without [DONE] or a terminal error event");
  }
  if (r->terminal_event && r->tokens == 0) {
    r->problems.push_back("committed stream failed before any token (should be an HTTP error)");
  }
}

}  // namespace

void RunHttpRequest(int port, absl::Duration hard_timeout, RequestRecord* r) {
  const RequestPlan& plan = r->plan;
  r->sent = absl::Now();
  const absl::Time abort_at = r->sent + plan.abort_after;
  const absl::Time give_up = r->sent + hard_timeout;
  const std::string path = plan.chat ? "/v1/chat/completions" : "/v1/completions";
  const std::string body = RequestBody(plan);
  const std::string request = absl::StrCat(
      "POST ", path, " HTTP/1.1\r\nHost: 127.0.0.1:", port,
      "\r\nContent-Type: application/json\r\nX-Request-Id: ", plan.client_rid,
      "\r\nContent-Length: ", body.size(), "\r\nConnection: close\r\n\r\n", body);
  const int fd = Connect(port, &r->transport_error);
  if (fd < 0) {
    r->elapsed = absl::Now() - r->sent;
    return;
  }
  ResponseReader reader;
  if (!SendAll(fd, request)) r->transport_error = "send failed";
  while (r->transport_error.empty() && !reader.done()) {
    const absl::Time now = absl::Now();
    if (now >= abort_at) {
      r->aborted = true;
      break;
    }
    if (now >= give_up) {
      r->transport_error = absl::StrCat("no end of response within ",
                                        absl::FormatDuration(hard_timeout));
      break;
    }
    const absl::Duration left = std::min(abort_at, give_up) - now;
    pollfd p = {fd, POLLIN, 0};
    const int n = poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) continue;
    char chunk[16384];
    const ssize_t got = recv(fd, chunk, sizeof(chunk), 0);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      r->transport_error = absl::StrCat("recv: ", std::strerror(errno));
      break;
    }
    if (got == 0) {
      reader.Eof();
      if (!reader.done()) {
        r->transport_error = reader.head_done() ? "connection closed mid-body"
                                                : "connection closed before a status line";
      }
      break;
    }
    if (!reader.Feed(chunk, static_cast<size_t>(got))) {
      r->transport_error = reader.error();
      break;
    }
  }
  close(fd);
  r->elapsed = absl::Now() - r->sent;
  r->complete = reader.done();
  if (!reader.head_done()) return;
  r->http_status = reader.status();
  r->rid = reader.header("x-request-id");
  if (r->rid.empty()) r->problems.push_back("response without x-request-id");
  if (r->http_status == 200 && plan.stream) {
    ReadStream(reader.body(), r->complete, r);
    return;
  }
  if (!r->complete) return;
  const json doc = json::parse(reader.body(), nullptr, false);
  if (r->http_status == 200) {
    if (!doc.is_object() || !doc.contains("choices")) {
      r->problems.push_back(absl::StrCat("200 without choices: ", reader.body().substr(0, 300)));
      return;
    }
    r->saw_done = true;
    if (!WellFormedUtf8(reader.body())) r->invalid_utf8 = true;
    CheckText(ChoiceText(doc), r);
    if (doc.contains("usage") && doc["usage"].is_object()) {
      r->tokens = doc["usage"].value("completion_tokens", 0);
    }
    return;
  }
  if (!doc.is_object() || !doc.contains("error") || !doc["error"].is_object()) {
    r->problems.push_back(absl::StrCat("HTTP ", r->http_status, " without an error body: ",
                                       reader.body().substr(0, 300)));
    return;
  }
  TakeError(doc["error"], r);
  if (r->error_code != r->http_status) {
    r->problems.push_back(absl::StrCat("error body code ", r->error_code, " under HTTP ",
                                       r->http_status));
  }
}

}  // namespace narwhal::soak
