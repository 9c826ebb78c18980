#include "server/http/openai_shim.h"

#include <algorithm>
#include <atomic>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/http/write.hpp>
#include <cctype>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <sstream>

#include "router/common/metrics_text.h"
#include "server/admission.h"
#include "server/client_request_id.h"
#include "server/http/connection.h"
#include "server/http/connection_tracker.h"
#include "server/http/generation_request.h"
#include "server/http/responses.h"
#include "server/http/routes.h"
#include "server/net/listen_socket.h"
#include "server/status_table.h"

namespace narwhal::server {
namespace {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;
using boost::system::error_code;
using json = nlohmann::json;

// How long the accept loop rests when the process is out of descriptors.
constexpr auto kAcceptBackoff = std::chrono::milliseconds(20);

}  // namespace

bool SplitHostPort(const std::string& address, std::string* host, int* port) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 >= address.size()) return false;
  std::string h = address.substr(0, colon);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  const std::string p = address.substr(colon + 1);
  if (p.size() > 5 ||
      !std::all_of(p.begin(), p.end(), [](unsigned char c) { return std::isdigit(c) != 0; })) {
    return false;
  }
  const int n = std::stoi(p);
  if (n > 65535) return false;
  *host = h;
  *port = n;
  return true;
}

class OpenAiShim::Impl final : public HttpRoutes {
 public:
  Impl(const router::Settings& settings, router::Router& router, router::Fleet& fleet,
       const engines::Clock& clock, prometheus::Registry& registry, std::string api_key,
       engines::IoLoops& loops, HttpDoorOptions options)
      : settings_(settings),
        router_(router),
        fleet_(fleet),
        clock_(clock),
        registry_(registry),
        book_(router),
        admission_(settings, clock, std::move(api_key), book_),
        loops_(loops),
        options_(options),
        created_(static_cast<long long>(clock.WallNow())),
        acceptor_(loops.executor(0)) {
    // Rendered once: the answer to a connection beyond the cap.
    HttpResponse full = ErrorResponse(503, ErrorType::kBackendUnavailable,
                                      "too many open connections (serving.max_connections = " +
                                          std::to_string(options_.max_connections) + ")");
    FinishForWire(full, 11, /*keep_alive=*/false);
    std::ostringstream out;
    out << full;
    capacity_refusal_ = out.str();
  }

  ~Impl() override {
    StopAccepting();
    Join();
  }

  absl::StatusOr<int> Bind(const std::string& host, int port) {
    return ListenOn(acceptor_, host, port, "HTTP");
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

  bool WaitIdle(engines::MonoTime deadline) { return tracker_.WaitIdle(deadline); }

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
    tracker_.StopAll();
  }

  void Join() {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return !accepting_; });
    }
    tracker_.WaitNoneOpen();
  }

  int open_connections() const { return tracker_.open(); }

  // --- HttpRoutes ---

  bool IsGeneration(http::verb method, std::string_view path) const override {
    return method == http::verb::post &&
           (path == "/v1/completions" || path == "/v1/chat/completions");
  }

  HttpResponse Plain(const HttpRequest& request, std::string_view path) override {
    return WithRequestId(request, Route(request, path));
  }

  Admission Admit(const HttpRequest& request, std::string_view path) override {
    AdmissionResult result = admission_.Admit(
        HttpDoorRequest(request, path),
        [&](const router::Settings& settings) { return HttpDoorBody(request, path, settings); });
    Admission admission;
    if (result.admitted()) {
      admission.request = std::move(result.request);
    } else {
      admission.refusal = RefusalResponse(result);
    }
    return admission;
  }

  HttpResponse Refuse(const HttpRequest& partial, std::string_view path, Refusal refusal) override {
    if (!IsGeneration(partial.method(), path)) {
      return WithRequestId(partial, ErrorResponse(RefusalOutcome(refusal)));
    }
    return RefusalResponse(admission_.Refuse(HttpDoorRequest(partial, path), std::move(refusal)));
  }

  engines::Awaitable<void> Serve(router::Request request,
                                 std::shared_ptr<router::ResponseSink> sink) override {
    return router_.Serve(std::move(request), std::move(sink));
  }

  bool draining() const override { return draining_.load(); }

  std::function<void()> before_scrape_;  // set before Start()

 private:
  engines::Awaitable<void> AcceptLoop() {
    std::unique_ptr<engines::Timer> backoff = clock_.NewTimer(acceptor_.get_executor());
    while (true) {
      error_code ec;
      tcp::socket socket = co_await acceptor_.async_accept(
          loops_.Place(), asio::redirect_error(asio::use_awaitable, ec));
      if (!acceptor_.is_open() || tracker_.stopping()) break;
      if (ec) {
        if (ec == asio::error::no_descriptors || ec == asio::error::no_buffer_space ||
            ec == asio::error::no_memory) {
          co_await engines::AsyncWaitUntil(*backoff, clock_.Now() + kAcceptBackoff,
                                           asio::use_awaitable);
        }
        continue;
      }
      socket.set_option(tcp::no_delay(true), ec);
      // Beyond the cap, the reserve keeps probes and scrapes answered.
      const std::string* reserve = nullptr;
      if (tracker_.open() >= options_.max_connections) {
        if (tracker_.reserve_open() >= options_.reserve_connections) {
          RefuseAtCapacity(socket);
          continue;
        }
        reserve = &capacity_refusal_;
      }
      auto connection = std::make_shared<Connection>(std::move(socket), clock_, options_, *this,
                                                     tracker_, reserve);
      asio::co_spawn(
          connection->executor(), [connection] { return connection->Run(); }, asio::detached);
    }
  }

  // Beyond serving.max_connections and the reserve: a fixed 503 written
  // without waiting (it may not get through), then the connection is closed.
  void RefuseAtCapacity(tcp::socket& socket) {
    error_code ignored;
    socket.non_blocking(true, ignored);
    socket.write_some(asio::buffer(capacity_refusal_), ignored);
    socket.shutdown(tcp::socket::shutdown_both, ignored);
    socket.close(ignored);
  }

  HttpResponse Ready() {
    std::string why;
    if (draining_.load()) {
      return JsonResponse(503, {{"status", "not_ready"}, {"reason", "shutting down"}});
    }
    if (fleet_.Ready(&why)) return JsonResponse(200, {{"status", "ready"}});
    return JsonResponse(503, {{"status", "not_ready"}, {"reason", why}});
  }

  HttpResponse Metrics() {
    fleet_.admin().PublishAll();
    if (before_scrape_) before_scrape_();
    HttpResponse response;
    response.result(http::status::ok);
    response.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
    response.body() = router::MetricsText(registry_.Collect());
    return response;
  }

  HttpResponse Route(const HttpRequest& request, std::string_view path) {
    if (request.method() == http::verb::get) {
      if (path == "/health") return JsonResponse(200, {{"status", "ok"}});
      if (path == "/ready") return Ready();
      if (path == "/metrics") return Metrics();
      if (path == "/v1/models") return Models(request);
    }
    return JsonResponse(
        404, OpenAiErrorBody(
                 404, ErrorType::kInvalidRequest,
                 "no route for " + std::string(request.method_string()) + " " + std::string(path)));
  }

  // Every response carries a request id; a response that is not a
  // generation's (probes, models, 404, a refused non-generation request)
  // gets a fresh one that no journal row carries, and the client's own
  // sane X-Request-Id echoed.
  HttpResponse WithRequestId(const HttpRequest& request, HttpResponse response) {
    response.set("x-request-id", router_.NewRequestId());
    const std::string client_rid = SaneClientRequestId(request["X-Request-Id"]);
    if (!client_rid.empty()) response.set(kClientRequestIdHeader, client_rid);
    return response;
  }

  HttpResponse Models(const HttpRequest& request) {
    if (!admission_.Authorized(AuthorizationHeader(request))) {
      return ErrorResponse(401, ErrorType::kUnauthorized, "invalid or missing API key");
    }
    return JsonResponse(200, {{"object", "list"},
                              {"data", json::array({{{"id", settings_.model},
                                                     {"object", "model"},
                                                     {"created", created_},
                                                     {"owned_by", "narwhal"}}})}});
  }

  // The error response of a refused (and already journaled) request.
  static HttpResponse RefusalResponse(const AdmissionResult& result) {
    HttpResponse response = ErrorResponse(result.outcome, result.refusal->param);
    response.set("x-request-id", result.request.rid);
    if (!result.request.client_rid.empty()) {
      response.set(kClientRequestIdHeader, result.request.client_rid);
    }
    return response;
  }

  const router::Settings& settings_;
  router::Router& router_;
  router::Fleet& fleet_;
  const engines::Clock& clock_;
  prometheus::Registry& registry_;
  RouterBook book_;
  const RequestAdmission admission_;
  engines::IoLoops& loops_;
  const HttpDoorOptions options_;
  const long long created_;
  std::string capacity_refusal_;
  tcp::acceptor acceptor_;
  ConnectionTracker tracker_;
  std::atomic<bool> draining_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  bool accepting_ = false;  // the accept loop runs
  bool stopped_ = false;
};

OpenAiShim::OpenAiShim(const router::Settings& settings, router::Router& router,
                       router::Fleet& fleet, const engines::Clock& clock,
                       prometheus::Registry& registry, std::string api_key, engines::IoLoops& loops)
    : OpenAiShim(settings, router, fleet, clock, registry, std::move(api_key), loops,
                 HttpDoorOptionsFrom(settings)) {}

OpenAiShim::OpenAiShim(const router::Settings& settings, router::Router& router,
                       router::Fleet& fleet, const engines::Clock& clock,
                       prometheus::Registry& registry, std::string api_key, engines::IoLoops& loops,
                       HttpDoorOptions options)
    : impl_(std::make_unique<Impl>(settings, router, fleet, clock, registry, std::move(api_key),
                                   loops, options)) {}

OpenAiShim::~OpenAiShim() = default;

absl::StatusOr<int> OpenAiShim::Bind(const std::string& host, int port) {
  return impl_->Bind(host, port);
}
void OpenAiShim::SetBeforeScrape(std::function<void()> hook) {
  impl_->before_scrape_ = std::move(hook);
}
void OpenAiShim::Start() { impl_->Start(); }
void OpenAiShim::BeginDrain() { impl_->BeginDrain(); }
bool OpenAiShim::WaitIdle(engines::MonoTime deadline) { return impl_->WaitIdle(deadline); }
void OpenAiShim::StopAccepting() { impl_->StopAccepting(); }
void OpenAiShim::Join() { impl_->Join(); }
int OpenAiShim::open_connections() const { return impl_->open_connections(); }

}  // namespace narwhal::server
