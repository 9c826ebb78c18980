// GrpcHealth: keeps grpc.health.v1.Health (Check and Watch) on the gRPC
// door (server/grpc/health_table.h) and gRPC's built-in service on the admin
// server in step with the router's readiness. Each server answers for "" and for each full service
// name it serves: SERVING while `ready()` holds, NOT_SERVING before (start-up) and once Drain() is
// called (for good). Each server also answers for kLivenessService, SERVING from construction until
// Drain() whatever the fleet's state: a liveness probe (Kubernetes') must not restart a router
// because its engines are down. A background thread re-reads
// readiness every `period` (readiness can change with time alone, e.g. when
// a quarantine ends) and logs every change.
//
// EnableGrpcHealthService() must run before the admin server is built.
#ifndef NARWHAL_SERVER_GRPC_GRPC_HEALTH_H_
#define NARWHAL_SERVER_GRPC_GRPC_HEALTH_H_

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "server/grpc/health_table.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace narwhal::server {

// Turns on gRPC's built-in health service for servers built after the call.
void EnableGrpcHealthService();

// gRPC's built-in health service of `server` as a HealthStatusTarget.
std::unique_ptr<HealthStatusTarget> BuiltInHealth(grpc::Server* server);

class GrpcHealth {
 public:
  // The process is up and serving its listeners (not the fleet's readiness).
  static constexpr char kLivenessService[] = "narwhal.liveness";

  struct Target {
    HealthStatusTarget* target = nullptr;
    std::vector<std::string> services;  // full names; "" is always added
  };

  // Marks every target NOT_SERVING at once, then follows `ready`.
  GrpcHealth(std::vector<Target> targets, std::function<bool()> ready,
             std::chrono::milliseconds period = std::chrono::milliseconds(100));
  ~GrpcHealth();  // stops the thread
  GrpcHealth(const GrpcHealth&) = delete;
  GrpcHealth& operator=(const GrpcHealth&) = delete;

  // NOT_SERVING from now on, whatever readiness says.
  void Drain();

 private:
  void Loop();
  void Set(bool serving);

  std::vector<Target> targets_;
  std::function<bool()> ready_;
  const std::chrono::milliseconds period_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool drained_ = false;
  std::optional<bool> serving_;
  std::thread thread_;
};

}  // namespace narwhal::server

#endif  // NARWHAL_SERVER_GRPC_GRPC_HEALTH_H_
