#include "server/grpc/grpc_health.h"

#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/server.h>

#include <utility>

#include "grpc/health/v1/health.pb.h"
#include "server/log.h"

namespace narwhal::server {

void EnableGrpcHealthService() {
  grpc::EnableDefaultHealthCheckService(true);
  // Server reflection lists grpc.health.v1.Health and describes it from the
  // generated descriptor pool: this links and registers its descriptor.
  (void)grpc::health::v1::HealthCheckRequest::descriptor();
}

namespace {

class BuiltInHealthTarget final : public HealthStatusTarget {
 public:
  explicit BuiltInHealthTarget(grpc::HealthCheckServiceInterface* service) : service_(service) {}
  void SetServingStatus(const std::string& service, bool serving) override {
    if (service_ != nullptr) service_->SetServingStatus(service, serving);
  }
  void Shutdown() override {
    if (service_ != nullptr) service_->Shutdown();
  }

 private:
  grpc::HealthCheckServiceInterface* service_;
};

}  // namespace

std::unique_ptr<HealthStatusTarget> BuiltInHealth(grpc::Server* server) {
  return std::make_unique<BuiltInHealthTarget>(server->GetHealthCheckService());
}

GrpcHealth::GrpcHealth(std::vector<Target> targets, std::function<bool()> ready,
                       std::chrono::milliseconds period)
    : targets_(std::move(targets)), ready_(std::move(ready)), period_(period) {
  for (Target& t : targets_) {
    t.services.insert(t.services.begin(), "");
    t.target->SetServingStatus(kLivenessService, true);
  }
  Set(false);
  thread_ = std::thread([this] { Loop(); });
}

GrpcHealth::~GrpcHealth() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void GrpcHealth::Drain() {
  std::lock_guard<std::mutex> lock(mu_);
  if (drained_) return;
  drained_ = true;
  Set(false);
  LogInfo("narwhal-serve: gRPC health NOT_SERVING: draining");
  for (Target& t : targets_) t.target->Shutdown();
}

void GrpcHealth::Set(bool serving) {
  for (Target& t : targets_) {
    for (const std::string& name : t.services) t.target->SetServingStatus(name, serving);
  }
  serving_ = serving;
}

void GrpcHealth::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    if (!drained_) {
      lock.unlock();
      const bool ready = ready_();
      lock.lock();
      if (!drained_ && !stop_ && serving_ != ready) {
        Set(ready);
        LogInfo(std::string("narwhal-serve: gRPC health ") +
                (ready ? "SERVING: every role has an engine in placement"
                       : "NOT_SERVING: the router is not ready"));
      }
    }
    cv_.wait_for(lock, period_, [this] { return stop_; });
  }
}

}  // namespace narwhal::server
