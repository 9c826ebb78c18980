#include "server/http/sse_sink.h"

#include <cstdio>
#include <sstream>
#include <string_view>
#include <utility>

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/write.hpp>

#include "server/client_request_id.h"

namespace narwhal::server {
namespace {

namespace asio = boost::asio;
namespace http = boost::beast::http;

constexpr std::string_view kCrlf = "\r\n";
constexpr std::string_view kLastChunk = "0\r\n\r\n";  // no trailers

}  // namespace

SseSink::SseSink(std::shared_ptr<ClientSocket> socket, std::string rid, unsigned version,
                 bool keep_alive)
    : socket_(std::move(socket)),
      rid_(std::move(rid)),
      version_(version),
      keep_alive_(keep_alive && version >= 11) {}

void SseSink::Event(std::string_view data, const engines::StreamEvent& /*event*/) { Append(data); }

void SseSink::Append(std::string_view payload) {
  pending_.append("data: ");
  pending_.append(payload);
  pending_.append("\n\n");
}

engines::Awaitable<bool> SseSink::Flush(engines::MonoTime deadline) {
  if (broken_ || cancelled() || !socket_->open()) co_return false;
  if (pending_.empty()) co_return true;  // nothing new; nothing committed
  co_return co_await WritePending(deadline, /*last=*/false);
}

engines::Awaitable<bool> SseSink::Drain(engines::MonoTime /*deadline*/) {
  // Each Flush completed only once its write did: nothing is in flight.
  co_return !broken_ && !cancelled() && socket_->open();
}

void SseSink::Finish(router::Outcome outcome) { outcome_ = std::move(outcome); }

engines::Awaitable<bool> SseSink::End(std::string_view payload, engines::MonoTime deadline) {
  if (broken_ || !socket_->open()) co_return false;
  Append(payload);
  co_return co_await WritePending(deadline, /*last=*/true);
}

std::string SseSink::RenderHead() const {
  http::response<http::empty_body> head{http::status::ok, version_};
  head.set(http::field::content_type, "text/event-stream");
  head.set(http::field::cache_control, "no-cache");
  head.set("X-Accel-Buffering", "no");
  head.set("x-request-id", rid_);
  if (!client_rid_.empty()) head.set(kClientRequestIdHeader, client_rid_);
  if (version_ >= 11) head.chunked(true);
  head.keep_alive(keep_alive_);
  std::ostringstream out;
  out << head.base();
  return out.str();
}

engines::Awaitable<bool> SseSink::WritePending(engines::MonoTime deadline, bool last) {
  std::swap(pending_, writing_);
  pending_.clear();
  const bool chunked = version_ >= 11;
  if (!committed_) head_ = RenderHead();
  // One gather write: [head] [chunk of the events] [last chunk].
  std::array<asio::const_buffer, 5>& buffers = iov_;
  buffers.fill(asio::const_buffer());
  if (!committed_) buffers[0] = asio::buffer(head_);
  if (!writing_.empty()) {
    if (chunked) {
      const int n = std::snprintf(chunk_size_line_, sizeof(chunk_size_line_), "%zx\r\n",
                                  writing_.size());
      buffers[1] = asio::buffer(chunk_size_line_, static_cast<size_t>(n));
      buffers[3] = asio::buffer(kCrlf.data(), kCrlf.size());
    }
    buffers[2] = asio::buffer(writing_);
  }
  if (chunked && last) buffers[4] = asio::buffer(kLastChunk.data(), kLastChunk.size());
  const boost::system::error_code ec = co_await socket_->Write(buffers, deadline);
  writing_.clear();
  if (ec) {
    broken_ = true;
    socket_->Close();
    co_return false;
  }
  committed_ = true;
  head_.clear();
  head_.shrink_to_fit();
  co_return true;
}

}  // namespace narwhal::server
