// gRPC's wire protocol over HTTP/2, the parts the door (server/grpc/h2_*)
// needs beside nghttp2's framing: the 5-byte message prefix, the
// grpc-timeout header, the percent-encoded grpc-message and the base64 of a
// -bin header (https://github.com/grpc/grpc/blob/master/doc/PROTOCOL-HTTP2.md).
// Pure functions and one incremental reader; no I/O.
#ifndef NARWHAL_SERVER_GRPC_GRPC_WIRE_H_
#define NARWHAL_SERVER_GRPC_GRPC_WIRE_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace narwhal::server {

// The longest grpc-timeout taken as given: about 100 years. A longer one
// (8 digits of hours reach 11,000 years, past what nanoseconds since the
// epoch can hold) is taken as this, as gRPC's own deadlines saturate.
inline constexpr std::chrono::hours kMaxGrpcTimeout{24 * 365 * 100};

// "<1-8 digits><H|M|S|m|u|n>", at most kMaxGrpcTimeout, else nullopt (the
// header is then ignored, as gRPC's own servers do with a malformed one).
std::optional<std::chrono::nanoseconds> ParseGrpcTimeout(std::string_view value);

// grpc-message's encoding: printable ASCII except '%' as is, every other
// byte as %XX.
std::string PercentEncodeGrpcMessage(std::string_view message);

// `message` with its 5-byte prefix (not compressed, big-endian length),
// appended to `out`.
void AppendGrpcMessage(std::string_view message, std::string* out);

// Splits a request's DATA bytes into messages, as they arrive in any pieces.
class GrpcMessageReader {
 public:
  enum class State {
    kOk,
    kTooLarge,    // a message's length is over the bound
    kCompressed,  // a message has the compressed flag (this door takes none)
  };
  explicit GrpcMessageReader(size_t max_message_bytes) : max_(max_message_bytes) {}

  // Takes `data`; completed messages join messages(). Once not kOk, the
  // reader ignores what follows.
  State Add(const uint8_t* data, size_t size);
  State state() const { return state_; }
  // The length the too-large message announced.
  uint64_t announced() const { return announced_; }
  std::vector<std::string>& messages() { return messages_; }
  // Bytes of a message still incomplete (a call that half-closes with some
  // is malformed).
  bool partial() const { return prefix_size_ > 0 || in_message_; }

 private:
  const size_t max_;
  State state_ = State::kOk;
  uint8_t prefix_[5] = {};
  size_t prefix_size_ = 0;
  bool in_message_ = false;
  uint64_t announced_ = 0;
  std::string current_;
  std::vector<std::string> messages_;
};

}  // namespace narwhal::server

#endif  // NARWHAL_SERVER_GRPC_GRPC_WIRE_H_
