#include "engines/sim/sim_engine.h"

#include <httplib.h>
#include <signal.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "engines/sim/accepted_sockets.h"
#include "engines/sim/engine_state.h"
#include "engines/sim/routes.h"

namespace narwhal::sim {
namespace {

constexpr int kListenBacklog = 1024;
constexpr size_t kMaxRequestBytes = 32 << 20;
constexpr absl::Duration kStartTimeout = absl::Seconds(10);

// An HTTPS server when the options name a certificate (and with a client
// CA, one that requires and verifies client certificates), else HTTP.
std::unique_ptr<httplib::Server> NewServer(const SimOptions& options) {
  if (options.tls_cert_file.empty()) return std::make_unique<httplib::Server>();
  return std::make_unique<httplib::SSLServer>(
      options.tls_cert_file.c_str(), options.tls_key_file.c_str(),
      options.tls_client_ca_file.empty() ? nullptr : options.tls_client_ca_file.c_str());
}

void IgnoreSigpipe() {
  struct sigaction current {};
  if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
    signal(SIGPIPE, SIG_IGN);
  }
}

}  // namespace

struct SimEngine::Impl {
  explicit Impl(SimOptions options) : state(std::move(options)), server(NewServer(state.options)) {}

  EngineState state;
  std::unique_ptr<httplib::Server> server;
  std::thread thread;
  std::atomic<int> listen_fd{-1};
  std::atomic<bool> thread_done{false};
  absl::Mutex mu;
  bool started ABSL_GUARDED_BY(mu) = false;
  bool stopped ABSL_GUARDED_BY(mu) = false;
};

SimEngine::SimEngine(SimOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}

SimEngine::~SimEngine() { Stop(); }

int SimEngine::port() const { return impl_->state.port.load(); }

std::string SimEngine::url() const {
  return absl::StrCat(impl_->state.options.tls_cert_file.empty() ? "http://" : "https://",
                      impl_->state.advertised_host, ":", port());
}

const SimOptions& SimEngine::options() const { return impl_->state.options; }

absl::Status SimEngine::Start() {
  Impl& impl = *impl_;
  absl::MutexLock lock(&impl.mu);
  if (impl.started) return absl::FailedPreconditionError("already started");
  impl.started = true;
  IgnoreSigpipe();
  const SimOptions& options = impl.state.options;
  httplib::Server& server = *impl.server;
  if (!server.is_valid()) {
    impl.stopped = true;
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot serve HTTPS with --tls-cert-file \"", options.tls_cert_file,
        "\" and --tls-key-file \"", options.tls_key_file, "\"",
        options.tls_client_ca_file.empty()
            ? ""
            : absl::StrCat(" and --tls-client-ca-file \"", options.tls_client_ca_file, "\"")));
  }

  const int threads = options.threads > 0 ? options.threads : 1;
  server.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  // SO_REUSEADDR only: without httplib's default SO_REUSEPORT a second
  // engine on the same port fails to bind instead of sharing it.
  server.set_socket_options([&impl](socket_t sock) {
    const int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    impl.listen_fd = sock;
  });
  // vLLM never compresses responses; httplib would (and would buffer event
  // streams doing so) for clients that accept gzip or br.
  server.set_pre_routing_handler([](const httplib::Request& req, httplib::Response&) {
    const_cast<httplib::Request&>(req).headers.erase("Accept-Encoding");
    return httplib::Server::HandlerResponse::Unhandled;
  });
  server.set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (res.status == 404 && res.body.empty()) {
      res.set_content("{\"detail\":\"Not Found\"}", "application/json");
    }
  });
  // Events go out as they are written, as with uvicorn.
  server.set_tcp_nodelay(true);
  server.set_keep_alive_max_count(1000);
  server.set_payload_max_length(kMaxRequestBytes);
  if (options.kv_events_port >= 0) {
    absl::StatusOr<std::unique_ptr<KvEventPublisher>> publisher =
        KvEventPublisher::Start(KvEventOptions{.host = options.host,
                                               .port = options.kv_events_port,
                                               .replay_port = options.kv_events_replay_port,
                                               .map_events = options.kv_events_map,
                                               .topic = options.kv_events_topic,
                                               .buffer_steps = 10000});
    if (!publisher.ok()) {
      impl.stopped = true;
      return publisher.status();
    }
    impl.state.kv_events = *std::move(publisher);
    impl.state.prefix_cache.SetSink(impl.state.kv_events.get());
    impl.state.log.Info(
        absl::StrCat("KV events on tcp://", options.host, ":", impl.state.kv_events->port(),
                     impl.state.kv_events->replay_port() >= 0
                         ? absl::StrCat(", replay on port ", impl.state.kv_events->replay_port())
                         : std::string(", no replay"),
                     " (", options.kv_events_map ? "map" : "array", " events, block size ",
                     options.block_size, ")"));
  }
  AddServiceRoutes(server, impl.state);
  AddInferenceRoutes(server, impl.state);
  AddControlRoutes(server, impl.state);
  AddPrefixCacheRoutes(server, impl.state);
  AddKvEventRoutes(server, impl.state);

  errno = 0;
  int port = -1;
  if (options.port == 0) {
    port = server.bind_to_any_port(options.host);
  } else if (server.bind_to_port(options.host, options.port)) {
    port = options.port;
  }
  if (port <= 0) {
    const int error = errno;
    impl.stopped = true;
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options.host, ":", options.port,
                     error != 0 ? absl::StrCat(": ", std::strerror(error)) : ""));
  }
  if (impl.listen_fd >= 0) ::listen(impl.listen_fd, kListenBacklog);
  impl.state.port = port;

  impl.thread = std::thread([&impl] {
    impl.server->listen_after_bind();
    impl.thread_done = true;
  });
  const absl::Time deadline = absl::Now() + kStartTimeout;
  while (!server.is_running() && !impl.thread_done && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  if (!server.is_running()) {
    impl.state.stopping.Notify();
    server.stop();
    impl.thread.join();
    impl.stopped = true;
    return absl::InternalError(absl::StrCat("server on port ", port, " did not start"));
  }
  impl.state.log.Info(absl::StrCat("listening on ", options.host, ":", port,
                                   options.tls_cert_file.empty() ? "" : " over HTTPS", " (model ",
                                   options.model, ", role ", RoleName(options.role), ", vllm ",
                                   options.vllm_version, ")"));
  return absl::OkStatus();
}

void SimEngine::Stop() {
  Impl& impl = *impl_;
  absl::MutexLock lock(&impl.mu);
  if (!impl.started || impl.stopped) return;
  impl.stopped = true;
  impl.state.stopping.Notify();
  impl.server->stop();
  // Idle keep-alive connections would otherwise hold their workers (and so
  // the join below) for the whole keep-alive timeout.
  ShutdownAcceptedSockets(impl.state.port.load());
  if (impl.thread.joinable()) impl.thread.join();
  impl.state.prefix_cache.SetSink(nullptr);
  impl.state.kv_events.reset();
  impl.state.log.Info("stopped");
}

}  // namespace narwhal::sim
