// RequestParser: Beast's request parser with the door's header limits.
//
// Beast bounds the bytes of a header block it holds at once (header_limit)
// and the body (body_limit, enforced while reading for both Content-Length
// and chunked framings), but neither the number of header fields nor their
// total size across reads. This parser counts both as each field is parsed
// and fails the read with http::error::header_limit at the first field over
// either limit, so a flood of header fields never grows the message (431).
// It also remembers whether a Content-Length and a Transfer-Encoding field
// both appeared (Beast accepts that pair when the coding is not "chunked"):
// the door refuses such a request (request smuggling).
//
// Fields of a chunked body's trailer count against the same limits but are
// dropped: they never join the request's headers, so nothing in a trailer
// (an Authorization, a Content-Length, an X-Request-Id) reaches the door.
//
// Beast parses nothing of a head until all of it is there, so a head that
// is cut short — too large (431) or too slow (408) — leaves the parser
// empty; ParseRequestLine() reads its request line from the raw bytes, so
// the door can still tell which request it refuses (and journal it).
#ifndef NARWHAL_SERVER_HTTP_REQUEST_PARSER_H_
#define NARWHAL_SERVER_HTTP_REQUEST_PARSER_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

#include <boost/beast/http/message.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

namespace narwhal::server {

class RequestParser final
    : public boost::beast::http::request_parser<boost::beast::http::string_body> {
 public:
  RequestParser(size_t max_header_bytes, int max_headers, uint64_t max_body_bytes)
      : max_header_bytes_(max_header_bytes), max_headers_(max_headers) {
    // Beast's own bound on a partial header block; ours counts every field.
    header_limit(static_cast<std::uint32_t>(max_header_bytes));
    body_limit(max_body_bytes);
  }

  // Both Content-Length and Transfer-Encoding were present.
  bool length_conflict() const { return content_length_ && transfer_encoding_; }
  bool saw_content_length() const { return content_length_; }
  // Transfer-Encoding fields seen.
  int transfer_encodings() const { return transfer_encoding_; }
  // The read failed on the field count (else on the bytes).
  bool too_many_fields() const { return fields_ > max_headers_; }

 private:
  void on_field_impl(boost::beast::http::field name, boost::beast::string_view name_string,
                     boost::beast::string_view value, boost::beast::error_code& ec) override {
    namespace http = boost::beast::http;
    ++fields_;
    // Each field as it stood on the wire: "name: value\r\n".
    header_bytes_ += name_string.size() + value.size() + 4;
    if (fields_ > max_headers_ || get().target().size() + header_bytes_ > max_header_bytes_) {
      ec = http::error::header_limit;
      return;
    }
    if (is_header_done()) return;  // a trailer field: counted, never kept
    if (name == http::field::content_length) content_length_ = true;
    if (name == http::field::transfer_encoding) ++transfer_encoding_;
    get().insert(name, name_string, value);
  }

  const size_t max_header_bytes_;
  const int max_headers_;
  int fields_ = 0;
  size_t header_bytes_ = 0;
  bool content_length_ = false;
  int transfer_encoding_ = 0;
};

// Beast ends every line of chunked framing (chunk-size line, trailer
// fields, the final empty line) only at CRLF and keeps waiting past a bare
// LF, so such a body would hang until the door's silence bound and be
// closed unanswered. `pending` is what the parser has not consumed yet —
// while a chunked body is read, a partial framing line (chunk data is
// consumed as it arrives) — and a LF in it without its CR is a framing
// error the door answers with 400.
inline bool BareLfInChunkedFraming(const RequestParser& parser, std::string_view pending) {
  if (!parser.is_header_done() || parser.is_done() || !parser.chunked()) return false;
  for (size_t i = 0; i < pending.size(); ++i) {
    if (pending[i] == '\n' && (i == 0 || pending[i - 1] != '\r')) return true;
  }
  return false;
}

// The request line at the start of `bytes` — "METHOD SP request-target SP
// HTTP/1.0|1.1 CRLF", after any empty lines — into `out`'s method, target
// and version. False unless `bytes` holds a complete, well-formed one (a
// token method, a target of visible ASCII).
inline bool ParseRequestLine(
    std::string_view bytes,
    boost::beast::http::request<boost::beast::http::string_body>* out) {
  while (bytes.substr(0, 2) == "\r\n") bytes.remove_prefix(2);
  const size_t end = bytes.find("\r\n");
  if (end == std::string_view::npos) return false;
  const std::string_view line = bytes.substr(0, end);
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos) return false;
  const std::string_view method = line.substr(0, sp1);
  const std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string_view version = line.substr(sp2 + 1);
  auto is_tchar = [](unsigned char c) {
    return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
           std::string_view("!#$%&'*+-.^_`|~").find(static_cast<char>(c)) != std::string_view::npos;
  };
  if (method.empty() || target.empty()) return false;
  for (const char c : method) {
    if (!is_tchar(static_cast<unsigned char>(c))) return false;
  }
  for (const char c : target) {
    if (static_cast<unsigned char>(c) <= 0x20 || static_cast<unsigned char>(c) >= 0x7f) {
      return false;
    }
  }
  if (version != "HTTP/1.0" && version != "HTTP/1.1") return false;
  out->method_string(method);
  out->target(target);
  out->version(version == "HTTP/1.0" ? 10 : 11);
  return true;
}

}  // namespace narwhal::server

#endif  // NARWHAL_SERVER_HTTP_REQUEST_PARSER_H_
