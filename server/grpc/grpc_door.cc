#include "server/grpc/grpc_door.h"

#include <atomic>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "server/grpc/grpc_reflection.h"
#include "server/grpc/health_table.h"
#include "server/grpc/inference_service.h"
#include "server/log.h"
#include "server/net/listen_socket.h"

namespace narwhal::server {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;

constexpr auto kAcceptBackoff = std::chrono::milliseconds(20);

}  // namespace

GrpcDoorOptions GrpcDoorOptionsFrom(const router::Settings& settings, TlsServerContext* tls) {
  const router::ServingSettings& s = settings.serving;
  GrpcDoorOptions o;
  o.max_connections = s.max_connections;
  o.connection.max_receive_bytes = static_cast<size_t>(GrpcMaxReceiveBytes(settings));
  o.connection.max_header_bytes = static_cast<size_t>(s.max_header_bytes);
  o.connection.header_timeout = engines::FromSeconds(s.header_timeout_s);
  // As the HTTP door bounds a body: a second more per 64 KiB received, at
  // most the request timeout.
  o.connection.max_request_time = engines::FromSeconds(s.request_timeout_s);
  o.connection.write_timeout = engines::FromSeconds(s.keepalive_timeout_s);
  o.connection.tls = tls;
  return o;
}

class GrpcDoor::Impl {
 public:
  Impl(const router::Settings& settings, router::Router& router, const engines::Clock& clock,
       engines::IoLoops& loops, std::string api_key, GrpcDoorOptions options)
      : clock_(clock),
        loops_(loops),
        options_(std::move(options)),
        inference_(settings, router, clock, std::move(api_key)),
        reflection_(ReflectionV1Service::WithStandardServices({"narwhal.v1.Inference"})),
        acceptor_(loops.executor(0)) {
    options_.connection.open_calls = &open_calls_;
    options_.connection.request_bytes = &request_bytes_;
    options_.connection.log = &connection_log_;
  }

  ~Impl() {
    StopAccepting();
    Join();
  }

  absl::StatusOr<int> Bind(const std::string& host, int port) {
    return ListenOn(acceptor_, host, port, "gRPC");
  }

  void Start() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!acceptor_.is_open() || accepting_ || stopped_) return;
      accepting_ = true;
    }
    asio::co_spawn(acceptor_.get_executor(), AcceptLoop(), [this](std::exception_ptr) {
      std::lock_guard<std::mutex> lock(mu_);
      accepting_ = false;
      cv_.notify_all();
    });
  }

  GrpcHealthTable& health() { return health_; }

  void BeginDrain() {
    ForEachConnection([](H2Connection& c) { c.Drain(); });
  }

  bool WaitIdle(engines::MonoTime deadline) {
    while (open_calls_.load() > 0) {
      if (clock_.Now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return true;
  }

  void StopAccepting() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopped_) return;
      stopped_ = true;
      if (accepting_) {
        asio::post(acceptor_.get_executor(), [this] {
          error_code ignored;
          acceptor_.close(ignored);
        });
      } else {
        error_code ignored;
        acceptor_.close(ignored);
      }
    }
    ForEachConnection([](H2Connection& c) { c.Close(); });
  }

  void Join() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return !accepting_ && connections_.empty(); });
  }

  int open_connections() const {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int>(connections_.size());
  }
  int open_calls() const { return open_calls_.load(); }

 private:
  // Runs `f` on each open connection, on its loop.
  template <typename F>
  void ForEachConnection(F f) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [raw, weak] : connections_) {
      if (std::shared_ptr<H2Connection> c = weak.lock()) {
        asio::post(c->executor(), [c, f] { f(*c); });
      }
    }
  }

  std::unique_ptr<H2CallHandler> Method(std::string_view path,
                                        const std::shared_ptr<H2Call>& call) {
    if (auto handler = inference_.NewCall(path, call)) return handler;
    if (auto handler = health_.NewCall(path, call)) return handler;
    if (path == "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo" ||
        path == "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo") {
      return NewReflectionCall(reflection_, call);
    }
    return nullptr;
  }

  engines::Awaitable<void> AcceptLoop() {
    std::unique_ptr<engines::Timer> backoff = clock_.NewTimer(acceptor_.get_executor());
    while (true) {
      error_code ec;
      tcp::socket socket = co_await acceptor_.async_accept(
          loops_.Place(), asio::redirect_error(asio::use_awaitable, ec));
      if (ec) {
        if (!acceptor_.is_open()) break;
        if (ec == asio::error::no_descriptors || ec == asio::error::no_buffer_space ||
            ec == asio::error::no_memory) {
          co_await engines::AsyncWaitUntil(*backoff, clock_.Now() + kAcceptBackoff,
                                           asio::use_awaitable);
        }
        continue;
      }
      socket.set_option(tcp::no_delay(true), ec);
      auto connection = std::make_shared<H2Connection>(
          std::move(socket), clock_, options_.connection,
          [this](std::string_view path, const std::shared_ptr<H2Call>& call) {
            return Method(path, call);
          });
      {
        // Registered under the lock that StopAccepting takes: a connection
        // is either closed by it or never served.
        std::lock_guard<std::mutex> lock(mu_);
        if (stopped_) break;
        if (static_cast<int>(connections_.size()) >= options_.max_connections) {
          if (!capacity_logged_) {
            capacity_logged_ = true;
            LogWarning("narwhal-serve: gRPC door at serving.max_connections (" +
                       std::to_string(options_.max_connections) +
                       "): further connections are closed at once");
          }
          connection->Close();
          continue;
        }
        connections_.emplace(connection.get(), connection);
      }
      asio::co_spawn(
          connection->executor(), [connection] { return connection->Run(); },
          [this, raw = connection.get()](std::exception_ptr) {
            std::lock_guard<std::mutex> lock(mu_);
            connections_.erase(raw);
            cv_.notify_all();
          });
    }
  }

  const engines::Clock& clock_;
  engines::IoLoops& loops_;
  GrpcDoorOptions options_;
  InferenceService inference_;
  GrpcHealthTable health_;
  const ReflectionV1Service reflection_;
  tcp::acceptor acceptor_;
  std::atomic<int> open_calls_{0};
  std::atomic<int64_t> request_bytes_{0};
  H2ConnectionLog connection_log_;
  bool capacity_logged_ = false;  // acceptor's loop only
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool accepting_ = false;
  bool stopped_ = false;
  std::unordered_map<H2Connection*, std::weak_ptr<H2Connection>> connections_;
};

GrpcDoor::GrpcDoor(const router::Settings& settings, router::Router& router,
                   const engines::Clock& clock, engines::IoLoops& loops, std::string api_key,
                   GrpcDoorOptions options)
    : impl_(std::make_unique<Impl>(settings, router, clock, loops, std::move(api_key),
                                   std::move(options))) {}

GrpcDoor::~GrpcDoor() = default;

absl::StatusOr<int> GrpcDoor::Bind(const std::string& host, int port) {
  return impl_->Bind(host, port);
}
void GrpcDoor::Start() { impl_->Start(); }
GrpcHealthTable& GrpcDoor::health() { return impl_->health(); }
void GrpcDoor::BeginDrain() { impl_->BeginDrain(); }
bool GrpcDoor::WaitIdle(engines::MonoTime deadline) { return impl_->WaitIdle(deadline); }
void GrpcDoor::StopAccepting() { impl_->StopAccepting(); }
void GrpcDoor::Join() { impl_->Join(); }
int GrpcDoor::open_connections() const { return impl_->open_connections(); }
int GrpcDoor::open_calls() const { return impl_->open_calls(); }

}  // namespace narwhal::server
