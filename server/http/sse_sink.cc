#include "server/http/sse_sink.h"

#include <optional>
#include <sstream>
#include <utility>
#include <vector>

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/chunk_encode.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/write.hpp>

namespace narwhal::server {
namespace {

namespace asio = boost::asio;
namespace http = boost::beast::http;

template <typename ConstBuffers>
void AppendBuffers(const ConstBuffers& buffers, std::vector<asio::const_buffer>* out) {
  for (auto it = asio::buffer_sequence_begin(buffers); it != asio::buffer_sequence_end(buffers);
       ++it) {
    out->push_back(*it);
  }
}

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
  std::vector<asio::const_buffer>& buffers = iov_;
  buffers.clear();
  if (!committed_) buffers.push_back(asio::buffer(head_));
  std::optional<http::chunk_body<asio::const_buffer>> chunk;
  std::optional<http::chunk_last<http::chunk_crlf>> terminator;
  const asio::const_buffer events = asio::buffer(writing_);
  if (chunked) {
    if (events.size() > 0) {
      chunk.emplace(events);
      AppendBuffers(*chunk, &buffers);
    }
    if (last) {
      terminator.emplace();
      AppendBuffers(*terminator, &buffers);
    }
  } else if (events.size() > 0) {
    buffers.push_back(events);
  }
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
