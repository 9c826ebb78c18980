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
#ifndef NARWHAL_SERVER_HTTP_REQUEST_PARSER_H_
#define NARWHAL_SERVER_HTTP_REQUEST_PARSER_H_

#include <cstddef>
#include <cstdint>

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

}  // namespace narwhal::server

#endif  // NARWHAL_SERVER_HTTP_REQUEST_PARSER_H_
