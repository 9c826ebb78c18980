// An AdminService served on a loopback port over a real router::Fleet,
// Prober and HTTP engine client, with a stub to call it.
//
//   AdminHarness h(Engines({{"p0", url, Role::kPrefill}, ...}));
//   pb::Engine engine;
//   grpc::ClientContext ctx;
//   grpc::Status s = h.stub().GetEngine(&ctx, request, &engine);
//
// Engines that tests never talk to can have any URL; readmission and
// preflight tests point them at narwhal-sim processes.
#ifndef NARWHAL_TESTS_ADMIN_ADMIN_HARNESS_H_
#define NARWHAL_TESTS_ADMIN_ADMIN_HARNESS_H_

#include <grpcpp/grpcpp.h>
#include <prometheus/registry.h>

#include <memory>
#include <string>
#include <vector>

#include "engines/http/standalone_engine_client.h"
#include "narwhal/admin/v1/admin.grpc.pb.h"
#include "router/common/clock.h"
#include "router/common/metrics.h"
#include "router/common/settings.h"
#include "router/fleet/event_bus.h"
#include "router/fleet/fleet.h"
#include "router/fleet/prober.h"
#include "server/admin/admin_service.h"

namespace narwhal::testing {

// Settings for `engines` with short engine budgets, so failing checks end
// quickly.
inline router::Settings AdminTestSettings(std::vector<router::EngineSettings> engines) {
  router::Settings s;
  s.model = "Qwen/Qwen3-0.6B";
  s.engines = std::move(engines);
  s.engine.first_token_timeout_s = 1.0;
  s.engine.connect_timeout_s = 1.0;
  s.engine.health_timeout_s = 1.0;
  return s;
}

class AdminHarness {
 public:
  explicit AdminHarness(router::Settings settings, server::AdminOptions options = {})
      : settings_(std::move(settings)), metrics_(registry_), client_(ClientOptions(settings_)) {
    fleet_ = std::make_unique<router::Fleet>(settings_, clock_, &metrics_, nullptr, &events_);
    prober_ = std::make_unique<router::Prober>(client_.async(), fleet_->control(), clock_);
    service_ = std::make_unique<server::AdminService>(settings_, *fleet_, *prober_, events_,
                                                      client_.async(), client_.executor(), clock_,
                                                      std::move(options));
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    channel_ = grpc::CreateChannel("127.0.0.1:" + std::to_string(port_),
                                   grpc::InsecureChannelCredentials());
    stub_ = narwhal::admin::v1::Admin::NewStub(channel_);
  }

  ~AdminHarness() {
    service_->Shutdown();
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  }

  narwhal::admin::v1::Admin::Stub& stub() { return *stub_; }
  router::Fleet& fleet() { return *fleet_; }
  router::EventBus& events() { return events_; }
  // Publishes a marker through the fleet, as any fleet event goes: an
  // engine_hold_suppressed event whose iid is `name` (the bus and the
  // WatchEvents streams treat every kind alike).
  void Mark(const std::string& name, std::string detail = "") {
    router::FleetEvent event;
    event.kind = router::FleetEventKind::kEngineHoldSuppressed;
    event.iid = name;
    event.detail = std::move(detail);
    fleet_->admin().Publish(event);
  }
  server::AdminService& service() { return *service_; }
  grpc::Server& server() { return *server_; }
  prometheus::Registry& registry() { return registry_; }
  const router::Settings& settings() const { return settings_; }
  int port() const { return port_; }

 private:
  static engines::HttpEngineClientOptions ClientOptions(const router::Settings& s) {
    engines::HttpEngineClientOptions o;
    o.first_token_timeout_s = s.engine.first_token_timeout_s;
    o.decode_read_timeout_s = s.engine.decode_read_timeout_s;
    o.connect_timeout_s = s.engine.connect_timeout_s;
    o.connector = s.engine.connector;
    return o;
  }

  const router::Settings settings_;
  prometheus::Registry registry_;
  router::Metrics metrics_;
  router::RealClock clock_;
  engines::StandaloneEngineClient client_;
  router::EventBus events_;
  std::unique_ptr<router::Fleet> fleet_;
  std::unique_ptr<router::Prober> prober_;
  std::unique_ptr<server::AdminService> service_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<narwhal::admin::v1::Admin::Stub> stub_;
};

}  // namespace narwhal::testing

#endif  // NARWHAL_TESTS_ADMIN_ADMIN_HARNESS_H_
