// H2IdleResetFilter: drops a client's RST_STREAM for a stream the client
// never opened, before nghttp2 sees it.
//
// gRPC's C core can cancel a call after it picked the call's stream id and
// before it wrote the call's HEADERS; it then sends RST_STREAM for a stream
// that is still idle. RFC 9113 §5.1 makes that a connection error, and
// nghttp2 treats it as one (GOAWAY PROTOCOL_ERROR "RST_STREAM: stream in
// idle"), which would cut every other call on the connection. There is
// nothing to reset, so the frame is dropped instead. Everything else passes
// unchanged: the filter only splits the byte stream into frames (a 9-byte
// header and its payload, after the 24-byte client preface) and tracks the
// highest stream id a HEADERS frame opened.
//
// Not thread-safe: one per connection, on its loop.
#ifndef NARWHAL_SERVER_GRPC_H2_IDLE_RESET_FILTER_H_
#define NARWHAL_SERVER_GRPC_H2_IDLE_RESET_FILTER_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace narwhal::server {

class H2IdleResetFilter {
 public:
  // Appends to `out` what nghttp2 should see of `size` received bytes
  // (which may begin and end anywhere in a frame).
  void Filter(const uint8_t* data, size_t size, std::string* out);
  // RST_STREAM frames dropped so far.
  uint64_t dropped() const { return dropped_; }

 private:
  size_t preface_left_ = 24;
  uint8_t header_[9] = {};
  size_t header_size_ = 0;
  size_t payload_left_ = 0;
  bool dropping_ = false;
  uint32_t max_opened_ = 0;
  uint64_t dropped_ = 0;
};

}  // namespace narwhal::server

#endif  // NARWHAL_SERVER_GRPC_H2_IDLE_RESET_FILTER_H_
