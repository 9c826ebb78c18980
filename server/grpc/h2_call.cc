#include "server/grpc/h2_call.h"

#include <absl/strings/escaping.h>

#include <algorithm>
#include <cstring>

#include "server/grpc/h2_connection.h"

namespace narwhal::server {

H2Call::H2Call(H2Connection* connection, int32_t stream_id, engines::Executor executor)
    : connection_(connection), stream_id_(stream_id), executor_(std::move(executor)) {}

void H2Call::AddInitialMetadata(std::string key, std::string value) {
  if (!headers_sent_) initial_metadata_.emplace_back(std::move(key), std::move(value));
}

void H2Call::Write(std::string_view message) {
  if (finished_ || connection_ == nullptr) return;
  AppendGrpcMessage(message, &out_);
  if (!headers_sent_) {
    connection_->SubmitHeaders(*this, /*with_data=*/true);
  } else {
    connection_->ResumeData(*this);
  }
}

void H2Call::WantWritable(size_t mark) {
  writable_mark_ = mark;
  wants_writable_ = true;
}

void H2Call::Finish(int code, std::string_view message, std::string_view details) {
  if (finished_) return;
  finished_ = true;
  trailers_.emplace_back("grpc-status", std::to_string(code));
  if (!message.empty()) trailers_.emplace_back("grpc-message", PercentEncodeGrpcMessage(message));
  if (!details.empty()) {
    trailers_.emplace_back("grpc-status-details-bin",
                           absl::Base64Escape(absl::string_view(details.data(), details.size())));
  }
  if (connection_ == nullptr) return;
  if (!headers_sent_) {
    connection_->SubmitTrailersOnly(*this);
  } else {
    connection_->ResumeData(*this);
  }
}

size_t H2Call::TakeOutput(uint8_t* buf, size_t length, bool* eof) {
  const size_t n = std::min(length, queued());
  if (n > 0) std::memcpy(buf, out_.data() + out_pos_, n);
  out_pos_ += n;
  if (out_pos_ == out_.size()) {
    out_.clear();
    out_pos_ = 0;
  } else if (out_pos_ > 65536 && out_pos_ * 2 > out_.size()) {
    out_.erase(0, out_pos_);
    out_pos_ = 0;
  }
  *eof = finished_ && queued() == 0;
  return n;
}

std::vector<std::pair<std::string, std::string>> H2Call::TakeTrailers() {
  return std::move(trailers_);
}

std::vector<std::pair<std::string, std::string>> H2Call::TakeInitialMetadata() {
  headers_sent_ = true;
  return std::move(initial_metadata_);
}

void H2Call::Closed() {
  connection_ = nullptr;
  if (finished_ || cancelled_) return;
  cancelled_ = true;
  if (handler_) handler_->OnCancel();
}

}  // namespace narwhal::server
