#include "server/grpc/health_table.h"

#include <boost/asio/post.hpp>
#include <utility>

#include "grpc/health/v1/health.pb.h"

namespace narwhal::server {
namespace {

constexpr int kNotFound = 5;
constexpr int kInvalidArgument = 3;
constexpr int kInternal = 13;

// Check: one request, one answer.
class HealthCheckCall final : public H2CallHandler {
 public:
  HealthCheckCall(GrpcHealthTable& table, std::weak_ptr<H2Call> call)
      : table_(table), call_(std::move(call)) {}

  void OnMessage(std::string message) override {
    ++messages_;
    message_ = std::move(message);
  }
  void OnHalfClose() override {
    std::shared_ptr<H2Call> call = call_.lock();
    if (!call) return;
    grpc::health::v1::HealthCheckRequest request;
    if (messages_ != 1 || !request.ParseFromString(message_)) {
      call->Finish(messages_ > 1 ? kInternal : kInvalidArgument,
                   "expected one grpc.health.v1.HealthCheckRequest");
      return;
    }
    const std::optional<GrpcHealthTable::Status> status = table_.Get(request.service());
    if (!status) {
      call->Finish(kNotFound, "unknown service");
      return;
    }
    grpc::health::v1::HealthCheckResponse response;
    response.set_status(static_cast<grpc::health::v1::HealthCheckResponse::ServingStatus>(*status));
    call->Write(response.SerializeAsString());
    call->Finish(0, "");
  }
  void OnCancel() override {}

 private:
  GrpcHealthTable& table_;
  std::weak_ptr<H2Call> call_;
  int messages_ = 0;
  std::string message_;
};

}  // namespace

// Watch: the status now, then each change, until the client ends the call.
class HealthWatchCall final : public H2CallHandler {
 public:
  HealthWatchCall(GrpcHealthTable& table, std::weak_ptr<H2Call> call)
      : table_(table), call_(std::move(call)) {}
  ~HealthWatchCall() override {
    if (watcher_ != 0) table_.RemoveWatcher(watcher_);
  }

  void OnMessage(std::string message) override {
    if (watcher_ != 0 || failed_) return;
    std::shared_ptr<H2Call> call = call_.lock();
    if (!call) return;
    grpc::health::v1::HealthCheckRequest request;
    if (!request.ParseFromString(message)) {
      failed_ = true;
      call->Finish(kInvalidArgument, "expected a grpc.health.v1.HealthCheckRequest");
      return;
    }
    service_ = request.service();
    watcher_ =
        table_.AddWatcher({service_, call->executor(), [weak = call_] {
                             if (std::shared_ptr<H2Call> c = weak.lock()) {
                               if (auto* self = static_cast<HealthWatchCall*>(c->handler())) {
                                 self->Send();
                               }
                             }
                           }});
    Send();
  }
  void OnHalfClose() override {}
  void OnCancel() override {
    if (watcher_ != 0) table_.RemoveWatcher(watcher_);
    watcher_ = 0;
  }

  void Send() {
    std::shared_ptr<H2Call> call = call_.lock();
    if (!call || call->finished()) return;
    const int status = table_.Get(service_).value_or(GrpcHealthTable::kServiceUnknown);
    if (status == last_) return;
    last_ = status;
    grpc::health::v1::HealthCheckResponse response;
    response.set_status(static_cast<grpc::health::v1::HealthCheckResponse::ServingStatus>(status));
    call->Write(response.SerializeAsString());
  }

 private:
  GrpcHealthTable& table_;
  std::weak_ptr<H2Call> call_;
  std::string service_;
  uint64_t watcher_ = 0;
  bool failed_ = false;
  int last_ = -1;
};

void GrpcHealthTable::SetServingStatus(const std::string& service, bool serving) {
  std::lock_guard<std::mutex> lock(mu_);
  if (shut_down_) return;
  const Status status = serving ? kServing : kNotServing;
  auto [it, added] = statuses_.try_emplace(service, status);
  if (!added && it->second == status) return;
  it->second = status;
  NotifyLocked(service);
}

void GrpcHealthTable::Shutdown() {
  std::lock_guard<std::mutex> lock(mu_);
  shut_down_ = true;
  for (auto& [service, status] : statuses_) {
    if (status == kNotServing) continue;
    status = kNotServing;
    NotifyLocked(service);
  }
}

std::optional<GrpcHealthTable::Status> GrpcHealthTable::Get(const std::string& service) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = statuses_.find(service);
  if (it == statuses_.end()) return std::nullopt;
  return it->second;
}

void GrpcHealthTable::NotifyLocked(const std::string& service) {
  for (const auto& [id, watcher] : watchers_) {
    if (watcher.service == service) boost::asio::post(watcher.executor, watcher.changed);
  }
}

uint64_t GrpcHealthTable::AddWatcher(Watcher watcher) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t id = next_watcher_++;
  watchers_.emplace(id, std::move(watcher));
  return id;
}

void GrpcHealthTable::RemoveWatcher(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  watchers_.erase(id);
}

std::unique_ptr<H2CallHandler> GrpcHealthTable::NewCall(std::string_view path,
                                                        const std::shared_ptr<H2Call>& call) {
  if (path == "/grpc.health.v1.Health/Check") {
    return std::make_unique<HealthCheckCall>(*this, call);
  }
  if (path == "/grpc.health.v1.Health/Watch") {
    return std::make_unique<HealthWatchCall>(*this, call);
  }
  return nullptr;
}

}  // namespace narwhal::server
