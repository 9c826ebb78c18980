// GrpcHealthTable: grpc.health.v1.Health on the gRPC door — the serving
// status of each service name, set by server/grpc/grpc_health.h, and the
// door's Check and Watch calls that read it.
//
//   Check  the name's status; NOT_FOUND for a name the table does not hold.
//   Watch  the status at once (SERVICE_UNKNOWN for a name it does not hold),
//          then each change, until the client ends the call.
//
// Shutdown() sets every name NOT_SERVING for good (a drain). Thread-safe:
// set from the health thread, read by calls on every loop; a watch is told
// of a change on its own call's loop.
#ifndef NARWHAL_SERVER_GRPC_HEALTH_TABLE_H_
#define NARWHAL_SERVER_GRPC_HEALTH_TABLE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "engines/clock.h"
#include "server/grpc/h2_call.h"

namespace narwhal::server {

// Where server/grpc/grpc_health.h sets statuses: this table, or gRPC's own
// health service on a grpc::Server (the admin listener).
class HealthStatusTarget {
 public:
  virtual ~HealthStatusTarget() = default;
  virtual void SetServingStatus(const std::string& service, bool serving) = 0;
  // NOT_SERVING for every name from now on; later sets are ignored.
  virtual void Shutdown() = 0;
};

class GrpcHealthTable final : public HealthStatusTarget {
 public:
  // grpc.health.v1.HealthCheckResponse.ServingStatus values.
  enum Status : int { kUnknown = 0, kServing = 1, kNotServing = 2, kServiceUnknown = 3 };

  void SetServingStatus(const std::string& service, bool serving) override;
  void Shutdown() override;
  // The status of `service`, or nullopt when the table does not hold it.
  std::optional<Status> Get(const std::string& service) const;

  // The handler of a Check or Watch call (by `path`), or null for another path.
  std::unique_ptr<H2CallHandler> NewCall(std::string_view path,
                                         const std::shared_ptr<H2Call>& call);

 private:
  struct Watcher {
    std::string service;
    engines::Executor executor;
    std::function<void()> changed;  // runs on `executor`
  };
  friend class HealthWatchCall;
  uint64_t AddWatcher(Watcher watcher);
  void RemoveWatcher(uint64_t id);
  void NotifyLocked(const std::string& service);

  mutable std::mutex mu_;
  std::map<std::string, Status> statuses_;
  bool shut_down_ = false;
  uint64_t next_watcher_ = 1;
  std::map<uint64_t, Watcher> watchers_;
};

}  // namespace narwhal::server

#endif  // NARWHAL_SERVER_GRPC_HEALTH_TABLE_H_
