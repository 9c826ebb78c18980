// H2Connection: one client connection of the gRPC door, HTTP/2 framed by
// nghttp2 on the connection's event loop — the loop that runs the requests
// of its calls, so a relayed message goes from the engine read to the
// client's socket without leaving the thread (no gRPC core, no completion
// queue, no handoff).
//
// A reader coroutine feeds what the socket gives to nghttp2, which calls
// back per stream: a new call (server/grpc/h2_call.h) at its headers, then
// its messages (server/grpc/grpc_wire.h) and its half-close, handed to the
// handler the door's method table makes for the call's path. A writer
// coroutine takes whatever nghttp2 has to send — frames of every call on
// the connection, as they became ready in one turn of the loop — and writes
// it in one go, bounded by the write timeout. When the session is over (a
// GOAWAY either way and no call left) the writer shuts the sending half and
// the reader reads until the client closes or the linger timeout passes, so
// a client's late ping never meets a closed socket (which would reset the
// connection under the client's last frames).
//
// Refused by the connection itself, before any handler: a request that is
// not a gRPC POST (HTTP 415 or 405), an unknown path (UNIMPLEMENTED),
// metadata over the header bound (RESOURCE_EXHAUSTED), a message over the
// receive bound (RESOURCE_EXHAUSTED), a compressed message (UNIMPLEMENTED:
// this door accepts identity encoding only). HTTP/2 itself — flow control,
// HPACK, PING, SETTINGS, resets, flood limits — is nghttp2's.
//
// Not thread-safe: used on its loop only.
#ifndef NARWHAL_SERVER_GRPC_H2_CONNECTION_H_
#define NARWHAL_SERVER_GRPC_H2_CONNECTION_H_

#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "engines/clock.h"
#include "server/grpc/h2_call.h"
#include "server/grpc/h2_idle_reset_filter.h"
#include "server/net/client_socket.h"

struct nghttp2_session;

namespace narwhal::server {

class TlsServerContext;

// The door's log of connections that ended abnormally (calls cut, an
// HTTP/2 error either way, a failed write): at most one line a second,
// with a count of what was left out. Thread-safe.
class H2ConnectionLog {
 public:
  void Log(const std::string& line);

 private:
  std::atomic<int64_t> last_ns_{0};
  std::atomic<uint64_t> suppressed_{0};
};

struct H2ConnectionOptions {
  // A message (either way) is at most this many bytes.
  size_t max_receive_bytes = 4 << 20;
  // The request headers (names and values) of one call.
  size_t max_header_bytes = 65536;
  // Streams one connection may have open at once.
  uint32_t max_concurrent_streams = 4096;
  // The handshake and the connection preface must be done within it, and a
  // call's request (its headers, its message and its end) within it plus a
  // second per min_request_bytes_per_s bytes of it received, at most
  // max_request_time: else the call ends DEADLINE_EXCEEDED (a bidirectional
  // stream of requests, reflection's, is exempt).
  engines::MonoClock::duration header_timeout = std::chrono::seconds(10);
  uint64_t min_request_bytes_per_s = 64 * 1024;
  engines::MonoClock::duration max_request_time = std::chrono::seconds(600);
  // One socket write must be done within it (else the connection is closed).
  engines::MonoClock::duration write_timeout = std::chrono::seconds(60);
  // Once a drained connection has sent everything: how long its sending
  // half stays shut while the client's last frames (pings, window updates)
  // are read, before the socket closes.
  engines::MonoClock::duration linger_timeout = std::chrono::seconds(1);
  TlsServerContext* tls = nullptr;  // null: plaintext
  // Counts the calls open on every connection (may be null).
  std::atomic<int>* open_calls = nullptr;
  // Request bytes held by calls of every connection that have not finished
  // sending (may be null: no bound). A call whose bytes would take the
  // total past max_request_bytes_held is refused RESOURCE_EXHAUSTED, so
  // clients that send slowly on many streams cannot grow memory without
  // bound.
  std::atomic<int64_t>* request_bytes = nullptr;
  H2ConnectionLog* log = nullptr;  // may be null: nothing logged
  int64_t max_request_bytes_held = int64_t{256} << 20;
};

class H2Connection : public std::enable_shared_from_this<H2Connection> {
 public:
  // Makes the handler of a call on `path` (nullptr: the path is unknown).
  using MethodTable = std::function<std::unique_ptr<H2CallHandler>(
      std::string_view path, const std::shared_ptr<H2Call>& call)>;

  H2Connection(boost::asio::ip::tcp::socket socket, const engines::Clock& clock,
               const H2ConnectionOptions& options, MethodTable methods);
  ~H2Connection();
  H2Connection(const H2Connection&) = delete;
  H2Connection& operator=(const H2Connection&) = delete;

  // Serves the connection until it ends; every open call is then cancelled.
  engines::Awaitable<void> Run();
  // GOAWAY: no new calls; the connection ends once its open calls are done.
  void Drain();
  // Closes the socket now (Run then ends; open calls are cancelled).
  void Close();
  engines::Executor executor() { return socket_.socket().get_executor(); }

 private:
  friend class H2Call;
  struct Callbacks;

  // --- for the calls ---
  // Sends the call's response headers; with its data source unless `end`.
  void SubmitHeaders(H2Call& call, bool with_data);
  void SubmitTrailersOnly(H2Call& call);
  void ResumeData(H2Call& call);
  void Wake();

  // --- from nghttp2 ---
  void PrefaceDone();  // the client's first SETTINGS came
  // Why the connection ends (the first reason given wins).
  void SetEnd(std::string why);
  void LogConnectionEnd(const std::string& what);
  void BeginCall(int32_t stream_id);
  void HeadersDone(H2Call& call);
  void EndOfRequest(H2Call& call);
  void RequestData(int32_t stream_id, const uint8_t* data, size_t size);
  void StreamClosed(int32_t stream_id);
  void FrameSent(int32_t stream_id, bool end_stream);
  void Refuse(H2Call& call, int code, std::string_view message);
  void ReleaseRequestBytes(H2Call& call);
  // The request-arrival bound (H2ConnectionOptions::header_timeout).
  engines::MonoTime RequestDeadline(const H2Call& call) const;
  void ArmRequestTimer(engines::MonoTime at);
  void OnRequestTimer(unsigned generation);

  engines::Awaitable<void> WriteLoop(std::shared_ptr<H2Connection> self);
  // Moves what nghttp2 has to send into out_; false on a session error.
  bool Collect();
  bool Done() const;

  ClientSocket socket_;
  const engines::Clock& clock_;
  const H2ConnectionOptions options_;
  MethodTable methods_;
  nghttp2_session* session_ = nullptr;
  std::unordered_map<int32_t, std::shared_ptr<H2Call>> calls_;
  std::string out_;
  // What nghttp2 gets of each read: a client's RST_STREAM for a stream it
  // never opened is dropped (server/grpc/h2_idle_reset_filter.h).
  H2IdleResetFilter idle_resets_;
  std::string filtered_;
  boost::asio::steady_timer wake_;
  bool writer_waiting_ = false;
  bool closed_ = false;
  bool draining_ = false;
  bool lingering_ = false;  // everything sent, the sending half shut
  bool preface_done_ = false;
  std::string end_;  // why the connection ends, when not the client's close
  std::unique_ptr<engines::Timer> preface_timer_;
  // Ends calls whose request did not arrive in time; armed for the earliest
  // such deadline of the calls still sending.
  std::unique_ptr<engines::Timer> request_timer_;
  engines::MonoTime request_timer_at_ = engines::MonoTime::max();
  unsigned request_timer_generation_ = 0;
  // Calls whose queue fell below their mark in the last Collect().
  std::vector<std::weak_ptr<H2Call>> writable_;
};

}  // namespace narwhal::server

#endif  // NARWHAL_SERVER_GRPC_H2_CONNECTION_H_
