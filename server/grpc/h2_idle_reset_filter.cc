#include "server/grpc/h2_idle_reset_filter.h"

#include <algorithm>
#include <cstring>

namespace narwhal::server {
namespace {

constexpr uint8_t kHeaders = 0x1;
constexpr uint8_t kRstStream = 0x3;

}  // namespace

void H2IdleResetFilter::Filter(const uint8_t* data, size_t size, std::string* out) {
  const auto keep = [out](const uint8_t* from, size_t n) {
    out->append(reinterpret_cast<const char*>(from), n);
  };
  size_t in = 0;
  while (in < size) {
    const size_t left = size - in;
    if (preface_left_ > 0) {
      const size_t take = std::min(left, preface_left_);
      keep(data + in, take);
      in += take;
      preface_left_ -= take;
      continue;
    }
    if (payload_left_ > 0) {
      const size_t take = std::min(left, payload_left_);
      if (!dropping_) keep(data + in, take);
      in += take;
      payload_left_ -= take;
      continue;
    }
    // A frame header, perhaps split across reads: held until whole.
    const size_t take = std::min(left, sizeof(header_) - header_size_);
    std::memcpy(header_ + header_size_, data + in, take);
    in += take;
    header_size_ += take;
    if (header_size_ < sizeof(header_)) break;
    header_size_ = 0;
    const size_t length = (size_t{header_[0]} << 16) | (size_t{header_[1]} << 8) | header_[2];
    const uint8_t type = header_[3];
    const uint32_t stream = ((uint32_t{header_[5]} & 0x7f) << 24) | (uint32_t{header_[6]} << 16) |
                            (uint32_t{header_[7]} << 8) | uint32_t{header_[8]};
    if (type == kHeaders) max_opened_ = std::max(max_opened_, stream);
    // A client's stream (odd id) above every one it opened is idle.
    dropping_ = type == kRstStream && length == 4 && (stream & 1) == 1 && stream > max_opened_;
    if (dropping_) {
      ++dropped_;
    } else {
      keep(header_, sizeof(header_));
    }
    payload_left_ = length;
  }
}

}  // namespace narwhal::server
