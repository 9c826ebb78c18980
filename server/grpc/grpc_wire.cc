#include "server/grpc/grpc_wire.h"

#include <algorithm>

namespace narwhal::server {

std::optional<std::chrono::nanoseconds> ParseGrpcTimeout(std::string_view value) {
  if (value.size() < 2 || value.size() > 9) return std::nullopt;
  int64_t amount = 0;
  for (size_t i = 0; i + 1 < value.size(); ++i) {
    const char c = value[i];
    if (c < '0' || c > '9') return std::nullopt;
    amount = amount * 10 + (c - '0');
  }
  using std::chrono::nanoseconds;
  // Hours, minutes and seconds in whole seconds (8 digits of hours fit in
  // 64 bits as seconds, not as nanoseconds): clamped before converting.
  int64_t seconds = 0;
  switch (value.back()) {
    case 'H':
      seconds = amount * 3600;
      break;
    case 'M':
      seconds = amount * 60;
      break;
    case 'S':
      seconds = amount;
      break;
    case 'm':
      return nanoseconds(std::chrono::milliseconds(amount));
    case 'u':
      return nanoseconds(std::chrono::microseconds(amount));
    case 'n':
      return nanoseconds(amount);
    default:
      return std::nullopt;
  }
  const int64_t max_seconds = std::chrono::seconds(kMaxGrpcTimeout).count();
  return nanoseconds(std::chrono::seconds(std::min(seconds, max_seconds)));
}

std::string PercentEncodeGrpcMessage(std::string_view message) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(message.size());
  for (const char ch : message) {
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 0x20 && c <= 0x7e && c != '%') {
      out.push_back(ch);
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 0xf]);
    }
  }
  return out;
}

void AppendGrpcMessage(std::string_view message, std::string* out) {
  const auto n = static_cast<uint32_t>(message.size());
  const char prefix[5] = {0, static_cast<char>(n >> 24), static_cast<char>(n >> 16),
                          static_cast<char>(n >> 8), static_cast<char>(n)};
  out->append(prefix, 5);
  out->append(message);
}

GrpcMessageReader::State GrpcMessageReader::Add(const uint8_t* data, size_t size) {
  while (size > 0 && state_ == State::kOk) {
    if (!in_message_) {
      const size_t take = std::min(size, sizeof(prefix_) - prefix_size_);
      std::copy(data, data + take, prefix_ + prefix_size_);
      prefix_size_ += take;
      data += take;
      size -= take;
      if (prefix_size_ < sizeof(prefix_)) break;
      prefix_size_ = 0;
      announced_ = (uint64_t{prefix_[1]} << 24) | (uint64_t{prefix_[2]} << 16) |
                   (uint64_t{prefix_[3]} << 8) | uint64_t{prefix_[4]};
      if (prefix_[0] != 0) {
        state_ = State::kCompressed;
        break;
      }
      if (announced_ > max_) {
        state_ = State::kTooLarge;
        break;
      }
      in_message_ = true;
      current_.clear();
      current_.reserve(announced_);
    }
    const size_t take = std::min<size_t>(size, announced_ - current_.size());
    current_.append(reinterpret_cast<const char*>(data), take);
    data += take;
    size -= take;
    if (current_.size() == announced_) {
      messages_.push_back(std::move(current_));
      current_ = std::string();
      in_message_ = false;
    }
  }
  return state_;
}

}  // namespace narwhal::server
