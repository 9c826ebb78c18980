#include "server/openai_shim.h"

#include <httplib.h>
#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <atomic>
#include <cstdio>
#include <thread>

#include <prometheus/text_serializer.h>

#include "engines/peer_socket.h"
#include "server/openai_request.h"
#include "server/status_table.h"

namespace narwhal::server {
namespace {

using json = nlohmann::json;
using router::ErrorType;
using router::Outcome;
using router::Terminal;

// How often a handler waiting on its request checks whether the client left.
constexpr std::chrono::milliseconds kPollInterval(20);

std::string FormatSeconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.6f", s);
  return buf;
}

engines::Api ApiForPath(const std::string& path) {
  return path.find("/chat/") != std::string::npos ? engines::Api::kChatCompletions
                                                  : engines::Api::kCompletions;
}

void WriteJson(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump(), "application/json");
}

void WriteOutcomeError(httplib::Response& res, const Outcome& o, const std::string& param = "") {
  if (o.status == 429 || o.status == 503) res.set_header("Retry-After", "1");
  WriteJson(res, o.status, OpenAiErrorBody(o.status, o.error_type, o.message, param));
}

Outcome Invalid(int status, std::string reason, std::string message,
                ErrorType type = ErrorType::kInvalidRequest) {
  Outcome o;
  o.terminal = status == 401 ? Terminal::kRejected : Terminal::kInvalid;
  o.reason = std::move(reason);
  o.status = status;
  o.error_type = type;
  o.message = std::move(message);
  return o;
}

// The streaming half of a committed response: relays chunks as SSE events.
// Counts a response in progress for as long as it lives (graceful drain).
class ActiveResponse {
 public:
  explicit ActiveResponse(std::atomic<int>& count) : count_(count) { ++count_; }
  ~ActiveResponse() { --count_; }
  ActiveResponse(const ActiveResponse&) = delete;
  ActiveResponse& operator=(const ActiveResponse&) = delete;

 private:
  std::atomic<int>& count_;
};

// The client's socket, looked up only once a request has been idle for a
// while: finding it scans the process's descriptors, which most requests —
// those that produce output promptly — never need to pay for.
class LazyPeer {
 public:
  static constexpr int kIdlePollsBeforeLookup = 2;  // x kPollInterval

  LazyPeer(int local_port, int remote_port) : local_port_(local_port), remote_port_(remote_port) {}
  // Called after each idle poll interval: true once the client went away.
  bool Gone() {
    if (!looked_up_) {
      if (++idle_polls_ < kIdlePollsBeforeLookup) return false;
      peer_ = engines::PeerSocket::Find(local_port_, remote_port_);
      looked_up_ = true;
    }
    return peer_.PeerClosed();
  }

 private:
  int local_port_;
  int remote_port_;
  int idle_polls_ = 0;
  bool looked_up_ = false;
  engines::PeerSocket peer_;
};

struct StreamRelay {
  StreamRelay(int local_port, int remote_port) : peer(local_port, remote_port) {}
  std::shared_ptr<router::ResponseChannel> channel;
  LazyPeer peer;
  router::Chunk chunk;
  bool first_pending = true;
  bool ended = false;  // the final event ([DONE] or the terminal error) was written
  std::string buf;
  std::unique_ptr<ActiveResponse> active;

  bool WriteEvent(httplib::DataSink& sink, std::string_view data) {
    buf.clear();
    buf.append("data: ");
    buf.append(data);
    buf.append("\n\n");
    return sink.write(buf.data(), buf.size());
  }

  // httplib calls this until it returns false or the sink is done.
  bool Provide(httplib::DataSink& sink) {
    if (first_pending) {
      first_pending = false;
      if (!WriteEvent(sink, chunk.data)) return Abandon();
      return true;
    }
    while (true) {
      switch (channel->Next(&chunk, kPollInterval)) {
        case router::ResponseChannel::Pop::kChunk:
          if (!WriteEvent(sink, chunk.data)) return Abandon();
          return true;
        case router::ResponseChannel::Pop::kEnd: {
          const Outcome& o = channel->outcome();
          if (o.terminal == Terminal::kCancelled) return false;
          const bool written = o.ok() ? WriteEvent(sink, "[DONE]")
                                      : WriteEvent(sink, TerminalStreamEvent(o).dump());
          if (!written) return false;
          ended = true;
          sink.done();
          return true;
        }
        case router::ResponseChannel::Pop::kEmpty:
          if (peer.Gone()) return Abandon();
          break;
      }
    }
  }

  bool Abandon() {
    channel->Cancel();  // B19: the client went away mid-stream
    return false;
  }
};

}  // namespace

bool SplitHostPort(const std::string& address, std::string* host, int* port) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 >= address.size()) return false;
  std::string h = address.substr(0, colon);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  const std::string p = address.substr(colon + 1);
  if (p.size() > 5 || !std::all_of(p.begin(), p.end(), [](unsigned char c) { return std::isdigit(c) != 0; })) return false;
  const int n = std::stoi(p);
  if (n > 65535) return false;
  *host = h;
  *port = n;
  return true;
}

class OpenAiShim::Impl {
 public:
  Impl(const router::Settings& settings, router::Router& router, router::Fleet& fleet,
       const router::Clock& clock, prometheus::Registry& registry, std::string api_key)
      : settings_(settings),
        router_(router),
        fleet_(fleet),
        clock_(clock),
        registry_(registry),
        api_key_(std::move(api_key)),
        created_(static_cast<long long>(clock.WallNow())) {
    const size_t threads = static_cast<size_t>(settings.serving.max_inflight) + 64;
    server_.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
    server_.set_payload_max_length(static_cast<size_t>(settings.serving.max_request_bytes));
    server_.set_keep_alive_max_count(10000);
    server_.set_read_timeout(30, 0);
    server_.set_write_timeout(30, 0);
    // Our own options replace httplib's SO_REUSEPORT default, so a second
    // server on the same port fails to bind instead of sharing it.
    server_.set_socket_options([this](socket_t sock) {
      int yes = 1;
      setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
      listen_fd_ = sock;
    });
    Routes();
  }

  absl::StatusOr<int> Bind(const std::string& host, int port) {
    int bound = port == 0 ? server_.bind_to_any_port(host)
                          : (server_.bind_to_port(host, port) ? port : -1);
    if (bound <= 0) {
      return absl::UnavailableError("cannot bind the HTTP listener to " + host + ":" +
                                    std::to_string(port));
    }
    // httplib listens with a backlog of 5; bursts of connects need more.
    if (listen_fd_ >= 0) ::listen(listen_fd_, 1024);
    return bound;
  }

  void Start() {
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }

  void BeginDrain() { draining_.store(true); }

  bool WaitIdle(engines::MonoTime deadline) {
    while (active_.load() > 0) {
      if (engines::MonoClock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return true;
  }

  void StopAccepting() {
    if (!stopped_.exchange(true) && server_.is_running()) server_.stop();
  }

  void Join() {
    if (thread_.joinable()) thread_.join();
  }

  ~Impl() {
    StopAccepting();
    Join();
  }

 private:
  void Routes() {
    auto generate = [this](const httplib::Request& req, httplib::Response& res) {
      Generate(req, res, ApiForPath(req.path));
    };
    server_.Post("/v1/completions", generate);
    server_.Post("/v1/chat/completions", generate);
    server_.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
      if (!Authorized(req)) return Unauthorized(res);
      WriteJson(res, 200,
                {{"object", "list"},
                 {"data", json::array({{{"id", settings_.model},
                                        {"object", "model"},
                                        {"created", created_},
                                        {"owned_by", "narwhal"}}})}});
    });
    server_.Get("/health", [](const httplib::Request&, httplib::Response& res) {
      WriteJson(res, 200, {{"status", "ok"}});
    });
    server_.Get("/ready", [this](const httplib::Request&, httplib::Response& res) {
      std::string why;
      if (draining_.load()) {
        WriteJson(res, 503, {{"status", "not_ready"}, {"reason", "shutting down"}});
      } else if (fleet_.Ready(&why)) {
        WriteJson(res, 200, {{"status", "ready"}});
      } else {
        WriteJson(res, 503, {{"status", "not_ready"}, {"reason", why}});
      }
    });
    server_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      fleet_.PublishAll();
      res.set_content(prometheus::TextSerializer().Serialize(registry_.Collect()),
                      "text/plain; version=0.0.4; charset=utf-8");
    });
    // Errors httplib raises itself (unknown path, body over the limit) get
    // the OpenAI error shape too; a 413 is journaled like any refusal.
    server_.set_error_handler(httplib::Server::HandlerWithResponse(
        [this](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
      if (res.status == 413) {
        router::Request r = NewRequest(req, ApiForPath(req.path));
        res.set_header("x-request-id", r.rid);
        const Outcome o = Invalid(413, "too_large",
                                  "request body exceeds serving.max_request_bytes (" +
                                      std::to_string(settings_.serving.max_request_bytes) +
                                      " bytes)");
        router_.RecordRefused(r, o);
        WriteOutcomeError(res, o);
      } else if (res.status == 404) {
        WriteJson(res, 404, OpenAiErrorBody(404, ErrorType::kInvalidRequest,
                                            "no route for " + req.method + " " + req.path));
      } else {
        WriteJson(res, res.status,
                  OpenAiErrorBody(res.status, ErrorType::kInvalidRequest,
                                  "HTTP " + std::to_string(res.status)));
      }
      return httplib::Server::HandlerResponse::Handled;
    }));
  }

  router::Request NewRequest(const httplib::Request& req, engines::Api api) {
    router::Request r;
    r.rid = router_.NewRequestId();
    r.client_rid = req.get_header_value("X-Request-Id");
    r.door = router::Door::kHttp;
    r.api = api;
    r.arrived = clock_.Now();
    r.arrived_wall = clock_.WallNow();
    r.deadline = r.arrived + engines::FromSeconds(settings_.serving.request_timeout_s);
    return r;
  }

  bool Authorized(const httplib::Request& req) const {
    return api_key_.empty() || req.get_header_value("Authorization") == "Bearer " + api_key_;
  }

  void Unauthorized(httplib::Response& res) {
    WriteJson(res, 401, OpenAiErrorBody(401, ErrorType::kUnauthorized, "invalid or missing API key"));
  }

  void Generate(const httplib::Request& req, httplib::Response& res, engines::Api api) {
    auto active = std::make_unique<ActiveResponse>(active_);
    router::Request r = NewRequest(req, api);
    res.set_header("x-request-id", r.rid);
    if (!Authorized(req)) {
      const Outcome o = Invalid(401, "unauthorized", "invalid or missing API key",
                                ErrorType::kUnauthorized);
      router_.RecordRefused(r, o);
      return WriteOutcomeError(res, o);
    }
    ParsedRequest parsed = ParseOpenAiRequest(req.body, api, settings_.model);
    if (!parsed.ok) {
      const Outcome o = Invalid(parsed.error.status,
                                parsed.error.status == 404 ? "model_not_found" : "invalid_request",
                                parsed.error.message);
      router_.RecordRefused(r, o);
      return WriteOutcomeError(res, o, parsed.error.param);
    }
    r.stream = parsed.stream;
    r.body = std::move(parsed.body);
    std::shared_ptr<router::ResponseChannel> channel = router_.Submit(std::move(r));

    // Hold status and headers until the first generated token (or the end),
    // watching for a client that leaves meanwhile (B19).
    auto relay = std::make_shared<StreamRelay>(req.local_port, req.remote_port);
    relay->active = std::move(active);  // counted until the stream ends
    relay->channel = channel;
    while (true) {
      const auto pop = channel->Next(&relay->chunk, kPollInterval);
      if (pop == router::ResponseChannel::Pop::kChunk) break;
      if (pop == router::ResponseChannel::Pop::kEnd) return WriteEnd(res, channel->outcome());
      if (!channel->cancelled() && relay->peer.Gone()) channel->Cancel();
    }
    res.status = 200;
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider(
        "text/event-stream",
        [relay](size_t, httplib::DataSink& sink) { return relay->Provide(sink); },
        [relay](bool) {
          // However the stream ended, a client that did not get its final
          // event must not leave the request running (B19).
          if (!relay->ended) relay->channel->Cancel();
          relay->active.reset();
        });
  }

  // The end of a request that never streamed: an error, or the assembled
  // non-streaming response.
  void WriteEnd(httplib::Response& res, const Outcome& o) {
    if (o.ttft_s) res.set_header("x-narwhal-ttft-s", FormatSeconds(*o.ttft_s));
    if (o.first_byte_s) res.set_header("x-narwhal-first-byte-s", FormatSeconds(*o.first_byte_s));
    if (o.ok()) return WriteJson(res, 200, o.body);
    if (o.terminal == Terminal::kCancelled) {
      res.status = 499;  // nobody is listening; closes the connection
      return;
    }
    WriteOutcomeError(res, o);
  }

  const router::Settings& settings_;
  router::Router& router_;
  router::Fleet& fleet_;
  const router::Clock& clock_;
  prometheus::Registry& registry_;
  const std::string api_key_;
  const long long created_;
  httplib::Server server_;
  int listen_fd_ = -1;
  std::atomic<bool> stopped_{false};
  std::atomic<bool> draining_{false};
  std::atomic<int> active_{0};  // generation responses in progress
  std::thread thread_;
};

OpenAiShim::OpenAiShim(const router::Settings& settings, router::Router& router,
                       router::Fleet& fleet, const router::Clock& clock,
                       prometheus::Registry& registry, std::string api_key)
    : impl_(std::make_unique<Impl>(settings, router, fleet, clock, registry,
                                   std::move(api_key))) {}

OpenAiShim::~OpenAiShim() = default;

absl::StatusOr<int> OpenAiShim::Bind(const std::string& host, int port) {
  return impl_->Bind(host, port);
}
void OpenAiShim::Start() { impl_->Start(); }
void OpenAiShim::BeginDrain() { impl_->BeginDrain(); }
bool OpenAiShim::WaitIdle(engines::MonoTime deadline) { return impl_->WaitIdle(deadline); }
void OpenAiShim::StopAccepting() { impl_->StopAccepting(); }
void OpenAiShim::Join() { impl_->Join(); }

}  // namespace narwhal::server
