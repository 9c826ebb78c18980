// AdminService: the operator's gRPC service, narwhal.admin.v1.Admin (SPEC §7).
// This file holds the handlers and the call plumbing they share; the
// message mappers are server/admin/admin_mappers.h, the shared callback
// helpers server/admin/admin_callbacks.h, the WatchEvents stream
// server/admin/watch_reactor.cc. Event counts and the readmission policy
// are the fleet's (router/fleet/fleet_event_counts.h, router/fleet/readmission.h).
//
// A callback-API service: reactors never block. Reads (engines, breakers,
// quarantine, config, the last preflight report) answer from Fleet
// snapshots inline. RPCs that do engine I/O — RunPreflight (B18) and
// ReadmitEngine (the validation of B17) — run on a small worker pool owned
// by the service and finish from there. WatchEvents opens a bounded EventBus
// watcher (router/fleet/event_bus.h): publishing only appends to its buffer and
// wakes the stream's reactor, which keeps one write in flight, so a slow
// watcher never blocks the publishers (client requests, the fleet monitor).
// At most AdminOptions::max_watchers streams are open (one more is refused
// with RESOURCE_EXHAUSTED), and a stream whose buffer passes
// watch_buffer_bytes (or watch_queue events) is ended with
// RESOURCE_EXHAUSTED; a client that does not take that end within
// watch_stall_timeout is cancelled, so it cannot keep its place either.
// Both are counted (EventBus::watch_stats) and logged, at most once a second.
//
// With a non-empty token every RPC requires the metadata
// "authorization: Bearer <token>" (else UNAUTHENTICATED).
#ifndef NARWHAL_SERVER_ADMIN_ADMIN_SERVICE_H_
#define NARWHAL_SERVER_ADMIN_ADMIN_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "engines/engine_client.h"
#include "narwhal/admin/v1/admin.grpc.pb.h"
#include "router/common/clock.h"
#include "router/common/settings.h"
#include "router/fleet/event_bus.h"
#include "router/fleet/fleet.h"
#include "router/fleet/preflight.h"
#include "router/fleet/prober.h"
#include "server/admin/worker_pool.h"

namespace narwhal::server {

class PendingUnaryCall;

// What a config reload did (B20), as ReloadConfig answers it.
struct ReloadAnswer {
  bool applied = false;
  uint64_t generation = 0;
  std::string error;  // rejected: why, the key path first
  std::vector<std::string> joined, left, changed, keys_changed;
  std::string summary;
};

struct AdminOptions {
  // Bearer token every RPC must carry; empty = none.
  std::string token;
  // Threads for RunPreflight and ReadmitEngine.
  size_t workers = 4;
  // WatchEvents streams open at once; one more is refused (RESOURCE_EXHAUSTED).
  size_t max_watchers = 64;
  // Bytes (EventBus::ChargedBytes) a watcher may have queued before it is
  // ended as too slow (RESOURCE_EXHAUSTED).
  size_t watch_buffer_bytes = 1 << 20;
  // Events a watcher may have queued before it is ended as too slow; 0 =
  // bounded by bytes only.
  size_t watch_queue = 1024;
  // Once a stream must end (too slow, shutdown), how long its client has to
  // take the end before the call is cancelled.
  std::chrono::milliseconds watch_stall_timeout = std::chrono::seconds(10);
  // Runs a config reload now (ReloadConfig; blocking: file I/O); unset =
  // the router has no config file (UNAVAILABLE).
  std::function<ReloadAnswer()> reload;
  // The settings in force now (GetConfig; a reload changes them); unset =
  // the ones the service was made with.
  std::function<std::shared_ptr<const router::Settings>()> current_settings;
  // The last reload's outcome, shown by GetConfig as `_reload`; unset = none.
  std::function<nlohmann::json()> reload_status;
};

class AdminService final : public narwhal::admin::v1::Admin::CallbackService {
 public:
  // Every reference must outlive the service. `client` is the engine port
  // preflight uses and `prober` runs readmission validation, their legs on
  // `control` (the owner's loop) while an admin worker thread waits.
  AdminService(const router::Settings& settings, router::Fleet& fleet, router::Prober& prober,
               router::EventBus& events, engines::AsyncEngineClient& client,
               engines::Executor control, const router::Clock& clock, AdminOptions options = {});
  // Waits for running preflight and readmission work (bounded by the
  // engine timeouts).
  ~AdminService() override;
  AdminService(const AdminService&) = delete;
  AdminService& operator=(const AdminService&) = delete;

  // Runs preflight, keeps the report as the last one, and publishes a
  // `preflight` event. Blocking; `trigger` is "startup" or "admin".
  router::PreflightReport Preflight(router::PairMode pairs, const std::string& trigger);

  // Ends every WatchEvents stream and every call still waiting for the
  // worker pool with UNAVAILABLE, and refuses new calls the same way. Call
  // before grpc::Server::Shutdown so the server stops promptly.
  void Shutdown();

  // --- narwhal.admin.v1.Admin ---
  grpc::ServerUnaryReactor* ListEngines(grpc::CallbackServerContext* context,
                                        const narwhal::admin::v1::ListEnginesRequest* request,
                                        narwhal::admin::v1::ListEnginesResponse* response) override;
  grpc::ServerUnaryReactor* GetEngine(grpc::CallbackServerContext* context,
                                      const narwhal::admin::v1::GetEngineRequest* request,
                                      narwhal::admin::v1::Engine* response) override;
  grpc::ServerUnaryReactor* GetBreakers(grpc::CallbackServerContext* context,
                                        const narwhal::admin::v1::GetBreakersRequest* request,
                                        narwhal::admin::v1::GetBreakersResponse* response) override;
  grpc::ServerUnaryReactor* ListQuarantine(
      grpc::CallbackServerContext* context,
      const narwhal::admin::v1::ListQuarantineRequest* request,
      narwhal::admin::v1::ListQuarantineResponse* response) override;
  grpc::ServerUnaryReactor* ListLinks(grpc::CallbackServerContext* context,
                                      const narwhal::admin::v1::ListLinksRequest* request,
                                      narwhal::admin::v1::ListLinksResponse* response) override;
  grpc::ServerUnaryReactor* RunPreflight(grpc::CallbackServerContext* context,
                                         const narwhal::admin::v1::RunPreflightRequest* request,
                                         narwhal::admin::v1::PreflightReport* response) override;
  grpc::ServerUnaryReactor* GetPreflightReport(
      grpc::CallbackServerContext* context,
      const narwhal::admin::v1::GetPreflightReportRequest* request,
      narwhal::admin::v1::PreflightReport* response) override;
  grpc::ServerUnaryReactor* EjectEngine(grpc::CallbackServerContext* context,
                                        const narwhal::admin::v1::EjectEngineRequest* request,
                                        narwhal::admin::v1::Engine* response) override;
  grpc::ServerUnaryReactor* ReadmitEngine(
      grpc::CallbackServerContext* context, const narwhal::admin::v1::ReadmitEngineRequest* request,
      narwhal::admin::v1::ReadmitEngineResponse* response) override;
  grpc::ServerUnaryReactor* DrainEngine(grpc::CallbackServerContext* context,
                                        const narwhal::admin::v1::DrainEngineRequest* request,
                                        narwhal::admin::v1::Engine* response) override;
  grpc::ServerUnaryReactor* ReleaseQuarantine(
      grpc::CallbackServerContext* context,
      const narwhal::admin::v1::ReleaseQuarantineRequest* request,
      narwhal::admin::v1::Engine* response) override;
  grpc::ServerWriteReactor<narwhal::admin::v1::Event>* WatchEvents(
      grpc::CallbackServerContext* context,
      const narwhal::admin::v1::WatchEventsRequest* request) override;
  grpc::ServerUnaryReactor* AddEngine(grpc::CallbackServerContext* context,
                                      const narwhal::admin::v1::AddEngineRequest* request,
                                      narwhal::admin::v1::Engine* response) override;
  grpc::ServerUnaryReactor* RemoveEngine(grpc::CallbackServerContext* context,
                                         const narwhal::admin::v1::RemoveEngineRequest* request,
                                         narwhal::admin::v1::Engine* response) override;
  grpc::ServerUnaryReactor* ReloadConfig(
      grpc::CallbackServerContext* context, const narwhal::admin::v1::ReloadConfigRequest* request,
      narwhal::admin::v1::ReloadConfigResponse* response) override;
  grpc::ServerUnaryReactor* GetConfig(grpc::CallbackServerContext* context,
                                      const narwhal::admin::v1::GetConfigRequest* request,
                                      google::protobuf::Struct* response) override;

 private:
  class WatchReactor;

  // A warning about a refused or slow watcher, at most one a second (the
  // others are counted in the next line).
  void LogWatchLimit(const std::string& message);
  // OK, or UNAUTHENTICATED / UNAVAILABLE (shutting down).
  grpc::Status Admit(grpc::CallbackServerContext* context) const;
  // The engine's snapshot, or NOT_FOUND / INVALID_ARGUMENT.
  grpc::Status Lookup(const std::string& iid, router::EngineSnapshot* out) const;
  // Runs `work` on the pool and finishes the call with its status; on
  // success the message `work` filled (a fresh one of the response's type)
  // becomes the response. Returns the call's reactor. After Shutdown the
  // call ends at once with UNAVAILABLE and `work` never runs.
  grpc::ServerUnaryReactor* Defer(
      grpc::CallbackServerContext* context, google::protobuf::Message* response,
      std::function<grpc::Status(google::protobuf::Message* result)> work);
  // The readmission of ReadmitEngine, on a worker thread.
  grpc::Status Readmit(const std::string& iid, narwhal::admin::v1::ReadmitEngineResponse* out);

  const router::Settings& settings_;
  router::Fleet& fleet_;
  router::Prober& prober_;
  router::EventBus& events_;
  engines::AsyncEngineClient& client_;
  const engines::Executor control_;
  const router::Clock& clock_;
  const AdminOptions options_;
  const router::WatchLimits watch_limits_;

  mutable std::mutex mu_;
  bool shutting_down_ = false;
  bool preflight_running_ = false;
  std::optional<narwhal::admin::v1::PreflightReport> last_report_;
  // Engines whose ReadmitEngine validation is running.
  std::set<std::string> readmitting_;
  std::set<std::shared_ptr<PendingUnaryCall>> pending_;
  // Open WatchEvents streams, for Shutdown.
  std::set<std::shared_ptr<router::EventBus::Watcher>> watchers_;
  router::MonoTime next_watch_log_{};
  long long watch_logs_suppressed_ = 0;

  // Last member: destroyed (joined) first, while the state above is alive.
  std::unique_ptr<WorkerPool> workers_;
};

}  // namespace narwhal::server

#endif  // NARWHAL_SERVER_ADMIN_ADMIN_SERVICE_H_
