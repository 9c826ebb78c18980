#include "server/probe_listener.h"

#include <atomic>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <string_view>

#include "server/admission.h"
#include "server/http/connection.h"
#include "server/http/connection_tracker.h"
#include "server/http/http_door_options.h"
#include "server/http/responses.h"
#include "server/http/routes.h"
#include "server/net/listen_socket.h"

namespace narwhal::server {
namespace {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;
using boost::system::error_code;

// Probes are small GETs from a few callers: tight bounds, no body.
HttpDoorOptions ProbeOptions() {
  HttpDoorOptions o;
  o.max_connections = 64;
  o.max_header_bytes = 8192;
  o.max_headers = 32;
  o.max_body_bytes = 0;
  o.header_timeout = std::chrono::seconds(5);
  o.body_timeout = std::chrono::seconds(5);
  o.keepalive_timeout = std::chrono::seconds(15);
  o.write_timeout = std::chrono::seconds(5);
  o.linger_timeout = std::chrono::milliseconds(200);
  o.linger_bytes = 64 * 1024;
  return o;
}

HttpResponse NotReady(const std::string& reason) {
  return JsonResponse(503, {{"status", "not_ready"}, {"reason", reason}});
}

}  // namespace

engines::MonoClock::duration ProbeStartupWindow(double connect_timeout_s, double health_timeout_s) {
  return engines::FromSeconds(connect_timeout_s + health_timeout_s);
}

class ProbeListener::Impl final : public HttpRoutes {
 public:
  Impl(const engines::Clock& clock, engines::IoLoops& loops, FleetReady fleet_ready,
       engines::MonoClock::duration startup_window)
      : clock_(clock),
        loops_(loops),
        fleet_ready_(std::move(fleet_ready)),
        startup_end_(clock.Now() + startup_window),
        options_(ProbeOptions()),
        acceptor_(loops.executor(0)) {}

  ~Impl() override { Stop(); }

  absl::StatusOr<int> Bind(const std::string& host, int port) {
    return ListenOn(acceptor_, host, port, "health", 64);
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

  void BeginDrain() { draining_.store(true); }

  void Stop() {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (!stopped_) {
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
      cv_.wait(lock, [this] { return !accepting_; });
    }
    tracker_.StopAll();
    tracker_.WaitNoneOpen();
  }

  // --- HttpRoutes ---

  bool IsGeneration(http::verb, std::string_view) const override { return false; }

  HttpResponse Plain(const HttpRequest& request, std::string_view path) override {
    if (request.method() == http::verb::get) {
      if (path == "/health") return JsonResponse(200, {{"status", "ok"}});
      if (path == "/ready") return Ready();
      if (path == "/serving") return Serving();
    }
    return ErrorResponse(404, ErrorType::kInvalidRequest,
                         "no route for " + std::string(request.method_string()) + " " +
                             std::string(path) +
                             " (the health listener serves GET /health, "
                             "/ready and /serving)");
  }

  Admission Admit(const HttpRequest&, std::string_view) override {
    Admission refused;  // never called: no generation route here
    refused.refusal = ErrorResponse(404, ErrorType::kInvalidRequest, "no generation route");
    return refused;
  }

  HttpResponse Refuse(const HttpRequest&, std::string_view, Refusal refusal) override {
    return ErrorResponse(RefusalOutcome(refusal));
  }

  engines::Awaitable<void> Serve(router::Request, std::shared_ptr<router::ResponseSink>) override {
    co_return;  // never called: no generation route here
  }

  bool draining() const override { return draining_.load(); }

 private:
  HttpResponse Ready() {
    if (draining_.load()) return NotReady("shutting down");
    std::string why;
    if (fleet_ready_(&why)) return JsonResponse(200, {{"status", "ready"}});
    return NotReady(why);
  }

  HttpResponse Serving() {
    if (draining_.load()) return NotReady("shutting down");
    if (!started_.load() && clock_.Now() < startup_end_) {
      std::string why;
      if (!fleet_ready_(&why)) return NotReady("starting: " + why);
    }
    started_.store(true);
    return JsonResponse(200, {{"status", "serving"}});
  }

  engines::Awaitable<void> AcceptLoop() {
    while (true) {
      error_code ec;
      tcp::socket socket = co_await acceptor_.async_accept(
          loops_.Next(), asio::redirect_error(asio::use_awaitable, ec));
      if (!acceptor_.is_open() || tracker_.stopping()) break;
      if (ec) continue;
      if (tracker_.open() >= options_.max_connections) {
        socket.close(ec);
        continue;
      }
      auto connection =
          std::make_shared<Connection>(std::move(socket), clock_, options_, *this, tracker_);
      asio::co_spawn(
          connection->executor(), [connection] { return connection->Run(); }, asio::detached);
    }
  }

  const engines::Clock& clock_;
  engines::IoLoops& loops_;
  const FleetReady fleet_ready_;
  const engines::MonoTime startup_end_;
  const HttpDoorOptions options_;
  tcp::acceptor acceptor_;
  ConnectionTracker tracker_;
  std::atomic<bool> draining_{false};
  // /serving answered 200 once: it stays 200 until the drain.
  std::atomic<bool> started_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  bool accepting_ = false;  // the accept loop runs
  bool stopped_ = false;
};

ProbeListener::ProbeListener(const engines::Clock& clock, engines::IoLoops& loops,
                             FleetReady fleet_ready, engines::MonoClock::duration startup_window)
    : impl_(std::make_unique<Impl>(clock, loops, std::move(fleet_ready), startup_window)) {}

ProbeListener::~ProbeListener() = default;

absl::StatusOr<int> ProbeListener::Bind(const std::string& host, int port) {
  return impl_->Bind(host, port);
}
void ProbeListener::Start() { impl_->Start(); }
void ProbeListener::BeginDrain() { impl_->BeginDrain(); }
void ProbeListener::Stop() { impl_->Stop(); }

}  // namespace narwhal::server
