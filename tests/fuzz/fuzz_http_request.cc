// The HTTP front door's request parsing. The door (server/http/connection.cc,
// Connection::ServeOne) reads from a socket inside a coroutine, so this
// target feeds the bytes through the same pieces over an in-memory stream
// that hands them out in fuzzer-chosen read sizes: the door's own parser
// class (server::RequestParser, which carries its header and body limits),
// configured by the door's own option function (server::HttpDoorOptionsFrom)
// from fleet settings, a flat_buffer capped as the door caps it, one first
// read of up to 16 KiB, http::read_header, then http::read_some until the
// message is done, and pipelined requests on the same buffer while the
// client keeps the connection alive. The framing decisions ServeOne makes
// between the head and the body (Content-Length with Transfer-Encoding, any
// coding but a lone "chunked", a chunked framing line that ends in a bare
// LF, trailer fields past the head's limits) are written inline in that
// coroutine and are mirrored here. A complete generation request goes
// through the door's body validation (server::ParseOpenAiRequest), as
// HttpRoutes::Admit does; a head Beast refused goes through
// server::ParseRequestLine on the raw bytes, as RefuseHead does.
//
// Input: byte 0 picks the door limits (bits 0-1) and how many read-size
// bytes follow (bits 2-4, cycled through; none = reads as large as the
// buffer allows); the rest is what the client sends.
//
// Checked: nothing throws; the head the door accepts never holds more than
// serving.max_headers fields or more than serving.max_header_bytes of request
// line and fields; a body is never larger than serving.max_request_bytes;
// the buffer never grows past its cap; a request that passed the framing
// checks has at most one framing; a refused body carries a message; a
// request line read from raw bytes has a method, a visible-ASCII target
// and version 1.0 or 1.1.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/buffer.hpp>
#include <boost/asio/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/system/system_error.hpp>

#include "engines/api.h"
#include "router/common/settings.h"
#include "server/http/http_door_options.h"
#include "server/http/request_parser.h"
#include "server/http/routes.h"
#include "server/openai_request.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using boost::system::error_code;
using narwhal::server::HttpDoorOptions;
using narwhal::server::RequestParser;

// server/http/connection.cc: one socket read, and the buffer's room past
// max_header_bytes (both private to that file).
constexpr size_t kReadSize = 16 * 1024;
constexpr size_t kBufferSlack = 16 * 1024;
constexpr int kMaxPipelined = 8;

// A client connection's bytes, handed out in the chosen read sizes.
class ScriptedStream {
 public:
  ScriptedStream(std::string_view bytes, std::vector<size_t> sizes)
      : bytes_(bytes), sizes_(std::move(sizes)) {}

  template <typename MutableBufferSequence>
  size_t read_some(const MutableBufferSequence& buffers, error_code& ec) {
    if (at_ == bytes_.size()) {
      ec = asio::error::eof;
      return 0;
    }
    size_t want = bytes_.size() - at_;
    if (!sizes_.empty()) want = std::min(want, std::max<size_t>(1, sizes_[next_++ % sizes_.size()]));
    const size_t n = asio::buffer_copy(buffers, asio::buffer(bytes_.data() + at_, want));
    at_ += n;
    ec = {};
    return n;
  }

  template <typename MutableBufferSequence>
  size_t read_some(const MutableBufferSequence& buffers) {
    error_code ec;
    const size_t n = read_some(buffers, ec);
    if (ec) throw boost::system::system_error(ec);
    return n;
  }

 private:
  std::string_view bytes_;
  std::vector<size_t> sizes_;
  size_t at_ = 0;
  size_t next_ = 0;
};

std::string_view PathOf(std::string_view target) { return target.substr(0, target.find('?')); }

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool IsHttpSyntaxError(const error_code& ec) {
  return &ec.category() == &http::make_error_code(http::error::bad_method).category();
}

narwhal::router::Settings DoorSettings(unsigned which) {
  narwhal::router::Settings s;  // the defaults: 64 KiB, 100 fields, 4 MiB
  if (which == 1) {             // the smallest limits the fleet file allows
    s.serving.max_header_bytes = 1024;
    s.serving.max_headers = 1;
    s.serving.max_request_bytes = 1024;
  } else if (which == 2) {
    s.serving.max_header_bytes = 1024;
    s.serving.max_headers = 8;
    s.serving.max_request_bytes = 2048;
  } else if (which == 3) {
    s.serving.max_header_bytes = 4096;
    s.serving.max_headers = 32;
    s.serving.max_request_bytes = 65536;
  }
  return s;
}

// The head as the limits count it: the target plus "name: value\r\n" each.
void CheckHead(const RequestParser& parser, const HttpDoorOptions& o) {
  const auto& request = parser.get();
  size_t fields = 0;
  size_t bytes = request.target().size();
  for (const auto& field : request) {
    ++fields;
    bytes += field.name_string().size() + field.value().size() + 4;
  }
  FUZZ_CHECK_MSG(fields <= static_cast<size_t>(o.max_headers), std::to_string(fields));
  FUZZ_CHECK_MSG(bytes <= o.max_header_bytes, std::to_string(bytes));
}

// One request; false when the door would close the connection after it.
bool ServeOne(ScriptedStream& stream, beast::flat_buffer& buffer, const HttpDoorOptions& o,
              const size_t cap) {
  error_code ec;
  if (buffer.size() == 0) {  // the wait for the first byte
    const size_t n = stream.read_some(buffer.prepare(kReadSize), ec);
    buffer.commit(n);
    if (ec) return false;
  }
  RequestParser parser(o.max_header_bytes, o.max_headers, o.max_body_bytes);
  http::read_header(stream, buffer, parser, ec);
  FUZZ_CHECK(buffer.size() <= cap);
  CheckHead(parser, o);
  if (ec) {
    // RefuseHead: 431, 413, 400, 408 or a plain close; none reads further.
    // A head Beast gave up on leaves the parser empty: the door then reads
    // the request line from the raw bytes to journal the refusal.
    if (parser.get().target().empty()) {
      const std::string_view raw(static_cast<const char*>(buffer.data().data()), buffer.size());
      narwhal::server::HttpRequest line;
      if (narwhal::server::ParseRequestLine(raw, &line)) {
        FUZZ_CHECK(!line.target().empty() && line.target().size() < raw.size());
        FUZZ_CHECK(line.version() == 10 || line.version() == 11);
        FUZZ_CHECK(!line.method_string().empty());
        for (const char c : line.target()) {
          FUZZ_CHECK(static_cast<unsigned char>(c) > 0x20 && static_cast<unsigned char>(c) < 0x7f);
        }
      }
    }
    return false;
  }
  FUZZ_CHECK(parser.is_header_done());
  const auto& request = parser.get();
  if (parser.length_conflict()) return false;  // 400
  if (parser.transfer_encodings() > 0 &&
      (parser.transfer_encodings() > 1 || !parser.chunked() ||
       !beast::iequals(Trim(request[http::field::transfer_encoding]), "chunked"))) {
    return false;  // 400
  }
  // One framing only from here on.
  const size_t lengths = request.count(http::field::content_length);
  const size_t codings = request.count(http::field::transfer_encoding);
  FUZZ_CHECK(codings <= 1 && (codings == 0 || lengths == 0));
  FUZZ_CHECK(codings == 0 || parser.chunked());
  if (parser.content_length()) FUZZ_CHECK(*parser.content_length() <= o.max_body_bytes);

  while (!parser.is_done() && !ec) {
    // Connection::ParseBuffered: what is buffered is parsed first.
    if (buffer.size() > 0) {
      parser.eager(true);
      buffer.consume(parser.put(buffer.data(), ec));
      if (ec == http::error::need_more) ec = {};
    }
    if (ec || parser.is_done()) break;
    const std::string_view pending(static_cast<const char*>(buffer.data().data()), buffer.size());
    if (narwhal::server::BareLfInChunkedFraming(parser, pending)) {
      FUZZ_CHECK(parser.chunked());
      return false;  // 400
    }
    http::read_some(stream, buffer, parser, ec);
    FUZZ_CHECK(buffer.size() <= cap);
    FUZZ_CHECK(request.body().size() <= o.max_body_bytes);
  }
  if (ec == http::error::body_limit) return false;  // 413
  if (ec == http::error::header_limit || ec == http::error::buffer_overflow) {
    return false;  // 431: trailer fields count with the head's
  }
  if (IsHttpSyntaxError(ec) && ec != http::error::partial_message &&
      ec != http::error::end_of_stream) {
    FUZZ_CHECK(!ec.message().empty());  // 400 "malformed HTTP request body: ..."
    return false;
  }
  if (ec) return false;
  FUZZ_CHECK(parser.is_done());
  FUZZ_CHECK(request.body().size() <= o.max_body_bytes);
  CheckHead(parser, o);  // trailer fields of a chunked body count too

  const std::string_view path = PathOf(request.target());
  if (request.method() == http::verb::post &&
      (path == "/v1/completions" || path == "/v1/chat/completions")) {
    const narwhal::engines::Api api = path == "/v1/completions"
                                          ? narwhal::engines::Api::kCompletions
                                          : narwhal::engines::Api::kChatCompletions;
    const narwhal::server::ParsedRequest parsed =
        narwhal::server::ParseOpenAiRequest(request.body(), api, "Qwen/Qwen3-0.6B");
    FUZZ_CHECK(parsed.ok || !parsed.error.message.empty());
  }
  return request.keep_alive();
}

void Run(const uint8_t* bytes, size_t size) {
  if (size == 0) return;
  const uint8_t control = bytes[0];
  const HttpDoorOptions options = narwhal::server::HttpDoorOptionsFrom(DoorSettings(control & 3));
  const size_t count = (control >> 2) & 7;
  size_t pos = 1;
  std::vector<size_t> sizes;
  for (; sizes.size() < count && pos < size; ++pos) sizes.push_back(bytes[pos]);
  ScriptedStream stream(
      std::string_view(reinterpret_cast<const char*>(bytes) + pos, size - pos), sizes);
  const size_t cap = options.max_header_bytes + kBufferSlack;
  beast::flat_buffer buffer(cap);
  for (int i = 0; i < kMaxPipelined; ++i) {
    if (!ServeOne(stream, buffer, options, cap)) break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    Run(data, size);
  } catch (const std::exception& e) {
    narwhal::fuzz::CheckFailed(__FILE__, __LINE__, "no exception escapes", e.what());
  }
  return 0;
}
