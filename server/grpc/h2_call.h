// H2Call: one gRPC call on an HTTP/2 connection of the gRPC door
// (server/grpc/h2_connection.h), as the method's handler sees it — the
// request's path, metadata and deadline in, framed messages and the status
// out. The connection owns the call while its stream is open; a handler
// keeps a weak reference.
//
// Output is queued here and handed to nghttp2 as the client's flow-control
// window allows; queued() tells the handler how far the client is behind, so
// it can stop taking from its source (the request's sink) until OnWritable.
// Response headers go out with the first message or the status; the status
// always ends the call in trailers, after the headers (a refused call is two
// HEADERS frames, so its initial metadata reaches the client as such).
//
// Not thread-safe: used on the connection's loop only.
#ifndef NARWHAL_SERVER_GRPC_H2_CALL_H_
#define NARWHAL_SERVER_GRPC_H2_CALL_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engines/clock.h"
#include "server/grpc/grpc_call.h"
#include "server/grpc/grpc_wire.h"

namespace narwhal::server {

class H2Connection;

// What a method does with its call. Every callback runs on the call's loop.
class H2CallHandler {
 public:
  virtual ~H2CallHandler() = default;
  // One whole request message.
  virtual void OnMessage(std::string message) = 0;
  // The client sent everything (END_STREAM).
  virtual void OnHalfClose() = 0;
  // The client reset the stream or its connection went away before the call
  // was finished. At most once; nothing written after it is sent.
  virtual void OnCancel() = 0;
  // What was queued fell below the mark after WantWritable().
  virtual void OnWritable() {}
  // A stream of requests (bidirectional), which the client may keep open:
  // exempt from the bound on the time a request takes to arrive.
  virtual bool StreamsRequests() const { return false; }
};

class H2Call {
 public:
  H2Call(H2Connection* connection, int32_t stream_id, engines::Executor executor);
  H2Call(const H2Call&) = delete;
  H2Call& operator=(const H2Call&) = delete;

  const std::string& path() const { return path_; }
  // Client metadata (pseudo-headers and HTTP/2's own excluded), valid for
  // the call's life.
  const GrpcMetadata& metadata() const { return metadata_; }
  // The grpc-timeout as a wall-clock deadline (max() when none).
  std::chrono::system_clock::time_point deadline() const { return deadline_; }
  // The client reset the stream or went away.
  bool cancelled() const { return cancelled_; }
  bool finished() const { return finished_; }
  // The handler the door's method table made for the call.
  H2CallHandler* handler() const { return handler_.get(); }
  engines::Executor executor() const { return executor_; }

  // Initial metadata; only before the first Write or Finish.
  void AddInitialMetadata(std::string key, std::string value);
  // Queues one message.
  void Write(std::string_view message);
  // Bytes queued and not yet taken by nghttp2.
  size_t queued() const { return out_.size() - out_pos_; }
  // Calls OnWritable once queued() falls to `mark` or below.
  void WantWritable(size_t mark);
  // Ends the call with grpc-status `code`, its message and (when not empty)
  // grpc-status-details-bin `details` (serialized google.rpc.Status), once
  // everything queued before it was sent. Later calls are ignored.
  void Finish(int code, std::string_view message, std::string_view details = {});

 private:
  friend class H2Connection;

  // --- for the connection ---
  // Copies up to `length` queued bytes into `buf`; sets `eof` when nothing
  // is left and the call is finishing (the trailers are due).
  size_t TakeOutput(uint8_t* buf, size_t length, bool* eof);
  void SetHandler(std::unique_ptr<H2CallHandler> handler) { handler_ = std::move(handler); }
  // The stream closed; the call is cancelled when it was not finished.
  void Closed();
  std::vector<std::pair<std::string, std::string>> TakeTrailers();
  std::vector<std::pair<std::string, std::string>> TakeInitialMetadata();

  H2Connection* connection_;  // null once the stream closed
  const int32_t stream_id_;
  const engines::Executor executor_;
  std::unique_ptr<H2CallHandler> handler_;
  // Request.
  std::string path_;
  std::string method_;
  std::string content_type_;
  std::vector<std::pair<std::string, std::string>> headers_;  // grows until END_HEADERS
  size_t header_bytes_ = 0;
  bool header_limit_hit_ = false;
  GrpcMetadata metadata_;  // views into headers_, built at END_HEADERS
  std::chrono::system_clock::time_point deadline_ = std::chrono::system_clock::time_point::max();
  std::unique_ptr<GrpcMessageReader> reader_;  // from END_HEADERS
  int64_t held_request_bytes_ = 0;             // counted in the door's total
  engines::MonoTime began_{};                  // its first HEADERS frame
  uint64_t received_bytes_ = 0;                // of its request's DATA
  bool half_closed_ = false;                   // the client's END_STREAM came
  bool refused_ = false;                       // answered by the door before any handler
  // Response.
  std::vector<std::pair<std::string, std::string>> initial_metadata_;
  bool headers_sent_ = false;
  bool data_open_ = false;  // headers sent with the data source
  std::string out_;
  size_t out_pos_ = 0;
  size_t writable_mark_ = 0;
  bool wants_writable_ = false;
  bool finished_ = false;  // Finish() called
  std::vector<std::pair<std::string, std::string>> trailers_;
  bool cancelled_ = false;
};

}  // namespace narwhal::server

#endif  // NARWHAL_SERVER_GRPC_H2_CALL_H_
