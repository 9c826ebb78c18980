#include "server/grpc/h2_connection.h"

#include <nghttp2/nghttp2.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <cstdio>
#include <vector>

#include "server/log.h"
#include "server/net/tls_context.h"

namespace narwhal::server {
namespace {

// "12.5 s".
std::string ElapsedText(engines::MonoClock::duration d) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f s", std::chrono::duration<double>(d).count());
  return text;
}

// Bytes of frames gathered for one socket write at most.
constexpr size_t kMaxWriteBytes = 1 << 20;
// What the door lets a client send before a WINDOW_UPDATE: per stream and
// for the whole connection.
constexpr int32_t kStreamWindow = 1 << 20;
constexpr int32_t kConnectionWindow = 8 << 20;

nghttp2_nv Nv(std::string_view name, std::string_view value, uint8_t flags = NGHTTP2_NV_FLAG_NONE) {
  return nghttp2_nv{reinterpret_cast<uint8_t*>(const_cast<char*>(name.data())),
                    reinterpret_cast<uint8_t*>(const_cast<char*>(value.data())), name.size(),
                    value.size(), flags};
}

std::vector<nghttp2_nv> ResponseHeaders(
    const std::vector<std::pair<std::string, std::string>>& metadata) {
  std::vector<nghttp2_nv> nv;
  nv.reserve(2 + metadata.size());
  nv.push_back(Nv(":status", "200"));
  nv.push_back(Nv("content-type", "application/grpc"));
  // Per-request values (ids) would only churn the client's HPACK table.
  for (const auto& [key, value] : metadata) nv.push_back(Nv(key, value, NGHTTP2_NV_FLAG_NO_INDEX));
  return nv;
}

std::vector<nghttp2_nv> Trailers(const std::vector<std::pair<std::string, std::string>>& fields) {
  std::vector<nghttp2_nv> nv;
  nv.reserve(fields.size());
  for (const auto& [key, value] : fields) {
    nv.push_back(
        Nv(key, value, key == "grpc-status" ? NGHTTP2_NV_FLAG_NONE : NGHTTP2_NV_FLAG_NO_INDEX));
  }
  return nv;
}

// "sent GOAWAY PROTOCOL_ERROR: <nghttp2's debug text>".
std::string GoawayText(const char* direction, const nghttp2_goaway& goaway) {
  std::string text =
      std::string(direction) + " GOAWAY " + nghttp2_http2_strerror(goaway.error_code);
  if (goaway.opaque_data_len > 0) {
    text += ": ";
    for (size_t i = 0; i < goaway.opaque_data_len && i < 200; ++i) {
      const char c = static_cast<char>(goaway.opaque_data[i]);
      text += c >= 0x20 && c < 0x7f ? c : '?';
    }
  }
  return text;
}

// Request headers that are HTTP/2's or gRPC's own, not the call's metadata.
bool IsTransportHeader(std::string_view name) {
  return name == "content-type" || name == "te" || name == "grpc-timeout" ||
         name == "grpc-encoding" || name == "grpc-accept-encoding";
}

}  // namespace

// nghttp2's callbacks, each forwarding to the connection (user_data).
struct H2Connection::Callbacks {
  static H2Connection& Of(void* user_data) { return *static_cast<H2Connection*>(user_data); }

  static int OnBeginHeaders(nghttp2_session*, const nghttp2_frame* frame, void* user_data) {
    if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST) {
      Of(user_data).BeginCall(frame->hd.stream_id);
    }
    return 0;
  }

  static int OnHeader(nghttp2_session* session, const nghttp2_frame* frame, const uint8_t* name,
                      size_t namelen, const uint8_t* value, size_t valuelen, uint8_t, void*) {
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) {
      return 0;  // a client's trailers carry nothing a call reads
    }
    auto* call =
        static_cast<H2Call*>(nghttp2_session_get_stream_user_data(session, frame->hd.stream_id));
    if (call == nullptr || call->header_limit_hit_) return 0;
    const std::string_view n(reinterpret_cast<const char*>(name), namelen);
    const std::string_view v(reinterpret_cast<const char*>(value), valuelen);
    call->header_bytes_ += namelen + valuelen + 32;  // HTTP/2's own accounting
    if (call->header_bytes_ > call->connection_->options_.max_header_bytes) {
      call->header_limit_hit_ = true;
      return 0;
    }
    if (n == ":path") {
      call->path_ = v;
    } else if (n == ":method") {
      call->method_ = v;
    } else if (n == "content-type") {
      call->content_type_ = v;
    } else if (n == "grpc-timeout") {
      if (const auto timeout = ParseGrpcTimeout(v)) {
        call->deadline_ = std::chrono::system_clock::now() +
                          std::chrono::duration_cast<std::chrono::system_clock::duration>(*timeout);
      }
    } else if (!n.empty() && n[0] != ':' && !IsTransportHeader(n)) {
      call->headers_.emplace_back(n, v);
    }
    return 0;
  }

  static int OnFrameRecv(nghttp2_session* session, const nghttp2_frame* frame, void* user_data) {
    if (frame->hd.type == NGHTTP2_GOAWAY && frame->goaway.error_code != NGHTTP2_NO_ERROR) {
      Of(user_data).SetEnd(GoawayText("received", frame->goaway));
      return 0;
    }
    if (frame->hd.type == NGHTTP2_SETTINGS && (frame->hd.flags & NGHTTP2_FLAG_ACK) == 0) {
      Of(user_data).PrefaceDone();
      return 0;
    }
    const bool end = (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0;
    if (frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA) return 0;
    auto* call =
        static_cast<H2Call*>(nghttp2_session_get_stream_user_data(session, frame->hd.stream_id));
    if (call == nullptr) return 0;
    if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST) {
      Of(user_data).HeadersDone(*call);
    }
    if (end) Of(user_data).EndOfRequest(*call);
    return 0;
  }

  static int OnData(nghttp2_session*, uint8_t, int32_t stream_id, const uint8_t* data, size_t len,
                    void* user_data) {
    Of(user_data).RequestData(stream_id, data, len);
    return 0;
  }

  static int OnStreamClose(nghttp2_session*, int32_t stream_id, uint32_t, void* user_data) {
    Of(user_data).StreamClosed(stream_id);
    return 0;
  }

  static int OnFrameSend(nghttp2_session*, const nghttp2_frame* frame, void* user_data) {
    if (frame->hd.type == NGHTTP2_GOAWAY && frame->goaway.error_code != NGHTTP2_NO_ERROR) {
      Of(user_data).SetEnd(GoawayText("sent", frame->goaway));
    }
    if (frame->hd.type == NGHTTP2_HEADERS || frame->hd.type == NGHTTP2_DATA) {
      Of(user_data).FrameSent(frame->hd.stream_id,
                              (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0);
    }
    return 0;
  }

  static ssize_t ReadData(nghttp2_session* session, int32_t stream_id, uint8_t* buf, size_t length,
                          uint32_t* flags, nghttp2_data_source* source, void* user_data) {
    auto* call = static_cast<H2Call*>(source->ptr);
    bool eof = false;
    const size_t n = call->TakeOutput(buf, length, &eof);
    if (call->wants_writable_ && call->queued() <= call->writable_mark_) {
      call->wants_writable_ = false;
      H2Connection& connection = Of(user_data);
      if (auto it = connection.calls_.find(stream_id); it != connection.calls_.end()) {
        connection.writable_.push_back(it->second);
      }
    }
    if (eof) {
      *flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
      const auto fields = call->TakeTrailers();
      const std::vector<nghttp2_nv> nv = Trailers(fields);
      nghttp2_submit_trailer(session, stream_id, nv.data(), nv.size());
      return static_cast<ssize_t>(n);
    }
    if (n == 0) return NGHTTP2_ERR_DEFERRED;
    return static_cast<ssize_t>(n);
  }
};

H2Connection::H2Connection(boost::asio::ip::tcp::socket socket, const engines::Clock& clock,
                           const H2ConnectionOptions& options, MethodTable methods)
    : socket_(std::move(socket), clock, options.tls),
      clock_(clock),
      options_(options),
      methods_(std::move(methods)),
      wake_(socket_.socket().get_executor()) {
  nghttp2_session_callbacks* callbacks = nullptr;
  nghttp2_session_callbacks_new(&callbacks);
  nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks, &Callbacks::OnBeginHeaders);
  nghttp2_session_callbacks_set_on_header_callback(callbacks, &Callbacks::OnHeader);
  nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, &Callbacks::OnFrameRecv);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, &Callbacks::OnData);
  nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, &Callbacks::OnStreamClose);
  nghttp2_session_callbacks_set_on_frame_send_callback(callbacks, &Callbacks::OnFrameSend);
  nghttp2_option* option = nullptr;
  nghttp2_option_new(&option);
  // A metadata value with spaces around it reaches admission as gRPC's own
  // servers pass it (an API key is compared after trimming), instead of a
  // reset stream (RFC 9113 lets a server refuse it; gRPC clients send it).
  nghttp2_option_set_no_rfc9113_leading_and_trailing_ws_validation(option, 1);
  nghttp2_session_server_new2(&session_, callbacks, this, option);
  nghttp2_option_del(option);
  nghttp2_session_callbacks_del(callbacks);
  const nghttp2_settings_entry settings[] = {
      {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, options_.max_concurrent_streams},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, static_cast<uint32_t>(kStreamWindow)},
      {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, static_cast<uint32_t>(options_.max_header_bytes)},
  };
  nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, settings, std::size(settings));
  nghttp2_session_set_local_window_size(session_, NGHTTP2_FLAG_NONE, 0, kConnectionWindow);
}

H2Connection::~H2Connection() { nghttp2_session_del(session_); }

engines::Awaitable<void> H2Connection::Run() {
  std::shared_ptr<H2Connection> self = shared_from_this();
  if (socket_.tls()) {
    const ClientSocket::error_code ec =
        co_await socket_.Handshake(clock_.Now() + options_.header_timeout);
    if (ec) {
      options_.tls->HandshakeFailed(ec.message());
      Close();
      co_return;
    }
  }
  boost::asio::co_spawn(executor(), WriteLoop(self), boost::asio::detached);
  // The client's preface (its SETTINGS frame) must come within the header
  // bound. A timer of its own: the socket's bounds the writes.
  preface_timer_ = clock_.NewTimer(executor());
  preface_timer_->AsyncWait(clock_.Now() + options_.header_timeout,
                            [weak = weak_from_this()](bool fired) {
                              std::shared_ptr<H2Connection> c = weak.lock();
                              if (fired && c && !c->preface_done_) {
                                c->SetEnd("no HTTP/2 preface within the header timeout");
                                c->Close();
                              }
                            });
  std::vector<uint8_t> buffer(16384);
  while (!closed_) {
    ClientSocket::error_code ec;
    const size_t n = co_await socket_.ReadSome(boost::asio::buffer(buffer), ec);
    if (ec || closed_) {
      // A client that closes or resets its connection says nothing more.
      if (ec && !closed_ && ec != boost::asio::error::eof &&
          ec != boost::asio::error::connection_reset) {
        SetEnd("read: " + ec.message());
      }
      break;
    }
    if (lingering_) continue;  // the session is over: only waiting for EOF
    filtered_.clear();
    idle_resets_.Filter(buffer.data(), n, &filtered_);
    const ssize_t used = nghttp2_session_mem_recv(
        session_, reinterpret_cast<const uint8_t*>(filtered_.data()), filtered_.size());
    if (used < 0) {  // not HTTP/2, or a connection error
      SetEnd(std::string("HTTP/2: ") + nghttp2_strerror(static_cast<int>(used)));
      break;
    }
    Wake();
  }
  Close();
}

void H2Connection::SetEnd(std::string why) {
  if (end_.empty()) end_ = std::move(why);
}

void H2Connection::LogConnectionEnd(const std::string& what) {
  if (options_.log == nullptr) return;
  ClientSocket::error_code ec;
  const auto peer = socket_.socket().remote_endpoint(ec);
  options_.log->Log(
      "grpc: connection from " +
      (ec ? std::string("?") : peer.address().to_string() + ":" + std::to_string(peer.port())) +
      " ended: " + what);
}

void H2ConnectionLog::Log(const std::string& line) {
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now().time_since_epoch())
                          .count();
  int64_t last = last_ns_.load();
  if (last != 0 && now - last < std::chrono::nanoseconds(std::chrono::seconds(1)).count()) {
    suppressed_.fetch_add(1);
    return;
  }
  if (!last_ns_.compare_exchange_strong(last, now)) {
    suppressed_.fetch_add(1);
    return;
  }
  const uint64_t suppressed = suppressed_.exchange(0);
  LogWarning(suppressed == 0 ? line
                             : line + " (" + std::to_string(suppressed) +
                                   " more such lines suppressed; at most one a second)");
}

void H2Connection::PrefaceDone() {
  if (preface_done_) return;
  preface_done_ = true;
  if (preface_timer_) preface_timer_->Cancel();
}

void H2Connection::Drain() {
  if (draining_ || closed_) return;
  draining_ = true;
  nghttp2_submit_goaway(session_, NGHTTP2_FLAG_NONE,
                        nghttp2_session_get_last_proc_stream_id(session_), NGHTTP2_NO_ERROR,
                        nullptr, 0);
  Wake();
}

void H2Connection::Close() {
  if (closed_) return;
  closed_ = true;
  if (preface_timer_) preface_timer_->Cancel();
  if (request_timer_) request_timer_->Cancel();
  socket_.Close();
  Wake();
  std::unordered_map<int32_t, std::shared_ptr<H2Call>> calls;
  calls.swap(calls_);
  size_t cut = 0;
  for (const auto& [id, call] : calls) cut += call->finished_ ? 0 : 1;
  if (cut > 0 || (!end_.empty() && preface_done_)) {
    LogConnectionEnd(std::to_string(cut) + (cut == 1 ? " call" : " calls") + " cut; " +
                     (end_.empty() ? std::string("the client closed the connection") : end_));
  }
  if (options_.open_calls != nullptr) {
    options_.open_calls->fetch_sub(static_cast<int>(calls.size()));
  }
  for (auto& [id, call] : calls) {
    ReleaseRequestBytes(*call);
    call->Closed();
  }
}

bool H2Connection::Done() const {
  return nghttp2_session_want_read(session_) == 0 && nghttp2_session_want_write(session_) == 0;
}

void H2Connection::Wake() {
  if (writer_waiting_) wake_.cancel();
}

engines::Awaitable<void> H2Connection::WriteLoop(
    [[maybe_unused]] std::shared_ptr<H2Connection> self) {
  while (!closed_) {
    if (!Collect()) {
      SetEnd("HTTP/2 session error while sending");
      break;
    }
    if (out_.empty()) {
      if (Done()) {
        // Everything is sent: shut the sending half, read until the client
        // closes or the linger bound passes (the timer closes the socket).
        lingering_ = true;
        ClientSocket::error_code ignored;
        socket_.socket().shutdown(boost::asio::ip::tcp::socket::shutdown_send, ignored);
        socket_.timer().Arm(clock_.Now() + options_.linger_timeout, DoorBound::kLinger);
        co_return;
      }
      writer_waiting_ = true;
      wake_.expires_at(boost::asio::steady_timer::time_point::max());
      boost::system::error_code ignored;
      co_await wake_.async_wait(RedirectTo(ignored));
      writer_waiting_ = false;
      continue;
    }
    const ClientSocket::error_code ec =
        co_await socket_.Write(boost::asio::buffer(out_), clock_.Now() + options_.write_timeout);
    out_.clear();
    if (ec) {
      SetEnd("write: " + ec.message());
      break;
    }
  }
  Close();
}

bool H2Connection::Collect() {
  while (out_.size() < kMaxWriteBytes) {
    const uint8_t* data = nullptr;
    const ssize_t n = nghttp2_session_mem_send(session_, &data);
    if (n < 0) return false;
    if (n == 0) {
      if (writable_.empty()) break;
      // Calls whose queue fell below their mark may queue more now.
      std::vector<std::weak_ptr<H2Call>> writable;
      writable.swap(writable_);
      for (const std::weak_ptr<H2Call>& weak : writable) {
        std::shared_ptr<H2Call> call = weak.lock();
        if (call && call->handler_ && !call->cancelled_) call->handler_->OnWritable();
      }
      continue;
    }
    out_.append(reinterpret_cast<const char*>(data), static_cast<size_t>(n));
  }
  return true;
}

void H2Connection::BeginCall(int32_t stream_id) {
  auto call = std::make_shared<H2Call>(this, stream_id, executor());
  call->began_ = clock_.Now();
  ArmRequestTimer(RequestDeadline(*call));
  nghttp2_session_set_stream_user_data(session_, stream_id, call.get());
  calls_[stream_id] = std::move(call);
  if (options_.open_calls != nullptr) options_.open_calls->fetch_add(1);
}

engines::MonoTime H2Connection::RequestDeadline(const H2Call& call) const {
  const auto allowance = std::chrono::duration_cast<engines::MonoClock::duration>(
      std::chrono::duration<double>(static_cast<double>(call.received_bytes_) /
                                    static_cast<double>(options_.min_request_bytes_per_s)));
  const engines::MonoClock::duration cap =
      std::max(options_.header_timeout, options_.max_request_time);
  return call.began_ + std::min(options_.header_timeout + allowance, cap);
}

void H2Connection::ArmRequestTimer(engines::MonoTime at) {
  if (closed_ || at >= request_timer_at_) return;
  if (!request_timer_) request_timer_ = clock_.NewTimer(executor());
  request_timer_at_ = at;
  const unsigned generation = ++request_timer_generation_;
  request_timer_->AsyncWait(at, [weak = weak_from_this(), generation](bool fired) {
    std::shared_ptr<H2Connection> c = weak.lock();
    if (fired && c) c->OnRequestTimer(generation);
  });
}

void H2Connection::OnRequestTimer(unsigned generation) {
  if (generation != request_timer_generation_ || closed_) return;
  request_timer_at_ = engines::MonoTime::max();
  const engines::MonoTime now = clock_.Now();
  engines::MonoTime next = engines::MonoTime::max();
  std::vector<std::shared_ptr<H2Call>> late;
  for (const auto& [id, call] : calls_) {
    const bool sending = !call->half_closed_ && !call->refused_ && !call->finished_ &&
                         !(call->handler_ && call->handler_->StreamsRequests());
    if (!sending) continue;
    const engines::MonoTime deadline = RequestDeadline(*call);
    if (deadline <= now) {
      late.push_back(call);
    } else {
      next = std::min(next, deadline);
    }
  }
  for (const std::shared_ptr<H2Call>& call : late) {
    Refuse(*call, /*DEADLINE_EXCEEDED=*/4,
           "the request did not arrive in time: " + std::to_string(call->received_bytes_) +
               " bytes in " + ElapsedText(now - call->began_) +
               " (serving.header_timeout_s, plus a second per " +
               std::to_string(options_.min_request_bytes_per_s) + " bytes received)");
    ReleaseRequestBytes(*call);
  }
  if (next != engines::MonoTime::max()) ArmRequestTimer(next);
}

void H2Connection::HeadersDone(H2Call& call) {
  for (const auto& [key, value] : call.headers_) {
    call.metadata_.emplace(grpc::string_ref(key.data(), key.size()),
                           grpc::string_ref(value.data(), value.size()));
  }
  if (call.header_limit_hit_) {
    Refuse(call, /*RESOURCE_EXHAUSTED=*/8,
           "request metadata over " + std::to_string(options_.max_header_bytes) + " bytes");
    return;
  }
  const std::string_view type = call.content_type_;
  if (call.method_ != "POST" ||
      (type != "application/grpc" && type.substr(0, 17) != "application/grpc+" &&
       type.substr(0, 17) != "application/grpc;")) {
    // Not a gRPC call: a plain HTTP answer, as gRPC's own servers give.
    call.refused_ = true;
    call.finished_ = true;
    const nghttp2_nv nv[] = {Nv(":status", call.method_ != "POST" ? "405" : "415")};
    nghttp2_submit_response(session_, call.stream_id_, nv, 1, nullptr);
    Wake();
    return;
  }
  auto it = calls_.find(call.stream_id_);
  std::unique_ptr<H2CallHandler> handler =
      it == calls_.end() ? nullptr : methods_(call.path_, it->second);
  if (handler == nullptr) {
    Refuse(call, /*UNIMPLEMENTED=*/12, "unknown method " + call.path_.substr(0, 128));
    return;
  }
  call.reader_ = std::make_unique<GrpcMessageReader>(options_.max_receive_bytes);
  call.SetHandler(std::move(handler));
}

void H2Connection::RequestData(int32_t stream_id, const uint8_t* data, size_t size) {
  auto it = calls_.find(stream_id);
  if (it == calls_.end()) return;
  std::shared_ptr<H2Call> call = it->second;
  if (call->refused_ || call->finished_ || call->reader_ == nullptr) return;
  call->received_bytes_ += size;
  if (options_.request_bytes != nullptr) {
    const int64_t n = static_cast<int64_t>(size);
    if (options_.request_bytes->fetch_add(n) + n > options_.max_request_bytes_held) {
      options_.request_bytes->fetch_sub(n);
      Refuse(*call, /*RESOURCE_EXHAUSTED=*/8,
             "the door holds " + std::to_string(options_.max_request_bytes_held) +
                 " bytes of unfinished requests already; retry later");
      ReleaseRequestBytes(*call);
      return;
    }
    call->held_request_bytes_ += n;
  }
  switch (call->reader_->Add(data, size)) {
    case GrpcMessageReader::State::kOk:
      break;
    case GrpcMessageReader::State::kTooLarge:
      Refuse(*call, /*RESOURCE_EXHAUSTED=*/8,
             "received message larger than max (" + std::to_string(call->reader_->announced()) +
                 " vs. " + std::to_string(options_.max_receive_bytes) + ")");
      return;
    case GrpcMessageReader::State::kCompressed:
      Refuse(*call, /*UNIMPLEMENTED=*/12,
             "compressed messages are not accepted (send with identity encoding)");
      return;
  }
  std::vector<std::string>& messages = call->reader_->messages();
  if (messages.empty()) return;
  std::vector<std::string> ready;
  ready.swap(messages);
  for (std::string& message : ready) {
    if (call->finished_ || call->cancelled_) return;
    call->handler_->OnMessage(std::move(message));
  }
}

void H2Connection::EndOfRequest(H2Call& call) {
  call.half_closed_ = true;
  if (call.refused_ || call.finished_ || call.handler_ == nullptr) {
    ReleaseRequestBytes(call);
    return;
  }
  if (call.reader_->partial()) {
    Refuse(call, /*INTERNAL=*/13, "the request ended inside a message");
  } else {
    call.handler_->OnHalfClose();  // the handler has taken its request
  }
  ReleaseRequestBytes(call);
}

void H2Connection::ReleaseRequestBytes(H2Call& call) {
  if (options_.request_bytes == nullptr || call.held_request_bytes_ == 0) return;
  options_.request_bytes->fetch_sub(call.held_request_bytes_);
  call.held_request_bytes_ = 0;
}

void H2Connection::Refuse(H2Call& call, int code, std::string_view message) {
  call.refused_ = true;
  call.Finish(code, message);
}

void H2Connection::SubmitHeaders(H2Call& call, bool with_data) {
  const auto metadata = call.TakeInitialMetadata();
  const std::vector<nghttp2_nv> nv = ResponseHeaders(metadata);
  if (with_data) {
    nghttp2_data_provider provider;
    provider.source.ptr = &call;
    provider.read_callback = &Callbacks::ReadData;
    nghttp2_submit_response(session_, call.stream_id_, nv.data(), nv.size(), &provider);
    call.data_open_ = true;
  } else {
    nghttp2_submit_headers(session_, NGHTTP2_FLAG_NONE, call.stream_id_, nullptr, nv.data(),
                           nv.size(), nullptr);
  }
  Wake();
}

void H2Connection::SubmitTrailersOnly(H2Call& call) {
  SubmitHeaders(call, /*with_data=*/false);
  const auto fields = call.TakeTrailers();
  const std::vector<nghttp2_nv> nv = Trailers(fields);
  nghttp2_submit_headers(session_, NGHTTP2_FLAG_END_STREAM, call.stream_id_, nullptr, nv.data(),
                         nv.size(), nullptr);
  Wake();
}

void H2Connection::ResumeData(H2Call& call) {
  if (call.data_open_) nghttp2_session_resume_data(session_, call.stream_id_);
  Wake();
}

void H2Connection::FrameSent(int32_t stream_id, bool end_stream) {
  if (!end_stream) return;
  auto it = calls_.find(stream_id);
  // The call ended before the client finished sending: reset its half, as
  // gRPC's servers do, so the stream does not stay open.
  if (it != calls_.end() && !it->second->half_closed_) {
    nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, stream_id, NGHTTP2_NO_ERROR);
  }
}

void H2Connection::StreamClosed(int32_t stream_id) {
  auto it = calls_.find(stream_id);
  if (it == calls_.end()) return;
  std::shared_ptr<H2Call> call = std::move(it->second);
  calls_.erase(it);
  if (options_.open_calls != nullptr) options_.open_calls->fetch_sub(1);
  ReleaseRequestBytes(*call);
  call->Closed();
  Wake();
}

}  // namespace narwhal::server
