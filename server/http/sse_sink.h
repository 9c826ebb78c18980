// SseSink: the router's ResponseSink for one HTTP generation request
// (router/response_sink.h).
//
// Event() appends `data: <payload>\n\n` to a reused buffer. Flush() writes
// everything appended since the last flush in ONE write: on HTTP/1.1 one
// chunk of a chunked `text/event-stream` response, preceded — on the first
// flush that has events — by the 200 head (`Cache-Control: no-cache`,
// `X-Accel-Buffering: no`, `x-request-id`), so status and headers stay held
// until the first generated token (SPEC §4). HTTP/1.0 clients get the events
// unframed and the connection closes after the stream. A write is bounded by
// the deadline the router passes: the connection's timer closes the socket
// when it passes. Flush completes when the kernel took the bytes, so Drain()
// has nothing left to wait for. In steady state a flush allocates nothing:
// the buffers are reused and the gather list is a fixed array (Beast's
// chunk_body would allocate its size line per chunk, so the chunk framing of
// RFC 9112 §7.1 — hex size, CRLF, data, CRLF — is laid out here).
//
// Finish() only records the outcome: the connection coroutine, once
// Router::Serve returned, writes the stream's end with End() — `[DONE]` or
// the terminal error event (B16) — or, when nothing was streamed, the
// ordinary response.
//
// Not thread-safe: used on the connection's loop (cancel_token() excepted).
#ifndef NARWHAL_SERVER_HTTP_SSE_SINK_H_
#define NARWHAL_SERVER_HTTP_SSE_SINK_H_

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <boost/asio/buffer.hpp>

#include "router/response_sink.h"
#include "server/net/client_socket.h"

namespace narwhal::server {

class SseSink final : public router::ResponseSink {
 public:
  // `version` is the client's HTTP version (10 or 11); `keep_alive` whether
  // the connection may carry another request after the stream.
  SseSink(std::shared_ptr<ClientSocket> socket, std::string rid, unsigned version, bool keep_alive);

  void Event(std::string_view data, const engines::StreamEvent& event) override;
  engines::Awaitable<bool> Flush(engines::MonoTime deadline) override;
  engines::Awaitable<bool> Drain(engines::MonoTime deadline) override;
  void Finish(router::Outcome outcome) override;
  // The client's sane X-Request-Id, echoed as x-client-request-id in the
  // head (set before the head is rendered).
  void set_client_rid(std::string client_rid) { client_rid_ = std::move(client_rid); }

  // The 200 head went out: the response is a stream.
  bool committed() const { return committed_; }
  // A write failed or timed out: the connection is unusable.
  bool broken() const { return broken_; }
  // Set by Finish().
  const std::optional<router::Outcome>& outcome() const { return outcome_; }

  // Writes `data: <payload>\n\n` as the stream's last event and ends the
  // stream (HTTP/1.1: the last chunk). False when the client did not take it.
  engines::Awaitable<bool> End(std::string_view payload, engines::MonoTime deadline);

 private:
  void Append(std::string_view payload);
  // Writes `pending_` (the head first if not committed); `last` adds the
  // chunked terminator.
  engines::Awaitable<bool> WritePending(engines::MonoTime deadline, bool last);
  std::string RenderHead() const;

  std::shared_ptr<ClientSocket> socket_;
  const std::string rid_;
  std::string client_rid_;
  const unsigned version_;
  const bool keep_alive_;
  bool committed_ = false;
  bool broken_ = false;
  std::string pending_;  // events appended since the last flush
  std::string writing_;  // the events of the write in flight (kept for reuse)
  std::string head_;
  // The gather list of the write in flight: head, chunk size line, events,
  // chunk CRLF, last chunk (unused entries are empty).
  std::array<boost::asio::const_buffer, 5> iov_;
  char chunk_size_line_[24] = {};
  std::optional<router::Outcome> outcome_;
};

}  // namespace narwhal::server

#endif  // NARWHAL_SERVER_HTTP_SSE_SINK_H_
