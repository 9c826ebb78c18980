#include "server/server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <prometheus/counter.h>
#include <prometheus/registry.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <optional>
#include <random>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include "engines/http/beast_engine_client.h"
#include "engines/http/io_loops.h"
#include "router/access_log.h"
#include "router/common/clock.h"
#include "router/common/journal.h"
#include "router/common/live_settings.h"
#include "router/common/metrics.h"
#include "router/fleet/cares_resolver.h"
#include "router/fleet/dns_groups.h"
#include "router/fleet/engine_wait.h"
#include "router/fleet/event_bus.h"
#include "router/fleet/fleet.h"
#include "router/fleet/fleet_monitor.h"
#include "router/fleet/kv_subscriber.h"
#include "router/fleet/preflight.h"
#include "router/fleet/prober.h"
#include "router/fleet/startup_checks.h"
#include "router/router.h"
#include "server/admin/admin_service.h"
#include "server/config/config_file.h"
#include "server/config/config_loader.h"
#include "server/config/config_reload.h"
#include "server/config/engine_options.h"
#include "server/embedded_fleet.h"
#include "server/grpc/grpc_credentials.h"
#include "server/grpc/grpc_door.h"
#include "server/grpc/grpc_health.h"
#include "server/grpc/grpc_reflection.h"
#include "server/grpc/inference_service.h"
#include "server/http/openai_shim.h"
#include "server/idle_memory_release.h"
#include "server/log.h"
#include "server/net/tls_context.h"
#include "server/probe_listener.h"
#include "server/process_metrics.h"
#include "server/status_table.h"
#include "server/tls_files.h"
#include "server/tracing/otlp_exporter.h"
#include "version/build_info.h"

namespace narwhal::server {
namespace {

absl::Status Failed(const std::string& message) {
  return absl::FailedPreconditionError("narwhal-serve: " + message);
}

// A gRPC server for the service `add` registers and grpc.reflection.v1
// (`reflection`) on
// `address` (port 0 picks one; *bound gets the actual port), or null when it
// cannot bind. A second server on the same port fails instead of sharing it
// (no SO_REUSEPORT). `max_receive_bytes` > 0 replaces gRPC's bound on a
// received message. gRPC's health and v1alpha reflection services join
// every server by themselves.
std::unique_ptr<grpc::Server> StartGrpcServer(
    const std::string& address, const std::function<void(grpc::ServerBuilder&)>& add,
    ReflectionV1Service* reflection, const std::shared_ptr<grpc::ServerCredentials>& credentials,
    int* bound, int max_receive_bytes = 0) {
  grpc::ServerBuilder builder;
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  if (max_receive_bytes > 0) builder.SetMaxReceiveMessageSize(max_receive_bytes);
  builder.AddListeningPort(address, credentials, bound);
  add(builder);
  builder.RegisterService(reflection);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server && *bound == 0) server.reset();
  return server;
}

bool SleepAndGoOn(double s) {
  std::this_thread::sleep_for(std::chrono::duration<double>(s));
  return true;
}

}  // namespace

// Every part of the process, declared in the order it is built: each one
// may refer to those above it, and they are destroyed in reverse.
struct Server::Parts {
  ServerOptions options;
  std::unique_ptr<EmbeddedFleet> embedded;
  std::optional<ConfigFile> config_file;  // with a config: the live file (B20)
  router::Settings settings;
  std::optional<TlsPem> tls_pem;
  std::unique_ptr<router::Journal> journal;
  std::unique_ptr<router::AccessLog> access_log;
  // Span export (tracing.otlp_endpoint); null without one.
  std::unique_ptr<OtlpExporter> span_exporter;
  prometheus::Registry registry;
  std::unique_ptr<router::Metrics> metrics;
  HttpDoorOptions door_options;
  std::shared_ptr<TlsServerContext> grpc_tls;  // the gRPC door's (ALPN h2)
  std::shared_ptr<grpc::ServerCredentials> grpc_credentials;
  router::RealClock clock;
  // The data plane: client connections, attempt loops and engine legs run
  // on these loops, one request per loop from its first byte to its last.
  std::unique_ptr<engines::IoLoops> loops;
  std::unique_ptr<engines::BeastEngineClient> engine_client;
  // Client legs and the control plane's probes use it alike (the probes on
  // the first loop; preflight and readmission wait for theirs from admin
  // worker threads).
  router::EventBus events;
  std::unique_ptr<router::Fleet> fleet;
  // The journal rows carry the statuses of the one status table.
  const StatusTableJournal journal_status{};
  std::unique_ptr<router::Router> router;
  // The config generation in force; requests keep the one they were
  // admitted under (B20).
  std::unique_ptr<router::LiveSettings> live;
  std::unique_ptr<router::DnsGroups> dns_groups;
  std::unique_ptr<ConfigReloader> reloader;
  std::unique_ptr<router::Prober> prober;
  std::unique_ptr<AdminService> admin;
  // The engines' KV-cache events (SPEC §14): its thread starts with the
  // first engine that publishes them; the monitor hands it the members.
  std::unique_ptr<router::kv::KvSubscriber> kv_events;
  std::unique_ptr<router::FleetMonitor> monitor;
  std::unique_ptr<router::StartupChecks> startup_checks;
  std::unique_ptr<IdleMemoryRelease> idle_release;
  std::unique_ptr<ProbeListener> probes;
  std::unique_ptr<OpenAiShim> shim;
  std::unique_ptr<ProcessMetrics> process_metrics;
  prometheus::Counter* access_log_dropped = nullptr;
  std::unique_ptr<ReflectionV1Service> admin_reflection;
  // The gRPC door (listen.grpc): narwhal.v1.Inference, health, reflection.
  std::unique_ptr<GrpcDoor> grpc_door;
  std::unique_ptr<HealthStatusTarget> admin_health;
  std::unique_ptr<grpc::Server> admin_server;
  std::unique_ptr<GrpcHealth> grpc_health;
  ServerAddresses addresses;

  // The command line's listeners win over the file's, at start and at every
  // reload.
  void Override(router::Settings* s) const {
    if (!options.http.empty()) s->listen.http = options.http;
    if (!options.grpc.empty()) s->listen.grpc = options.grpc;
    if (!options.admin.empty()) s->listen.admin = options.admin;
    if (!options.health.empty()) s->listen.health = options.health;
  }

  absl::Status LoadSettings();
  absl::Status OpenFiles();
  void BuildCore();
  absl::Status RunPreflight();
  void StartChecks();
  absl::Status StartListeners();
  // Stops the inference listeners and every thread that was started, in
  // the drain's order: after a drain (the admin listener is closed by then),
  // and for a Create that fails half way (no admin listener yet, nothing
  // admitted).
  void StopAll();
};

absl::Status Server::Parts::LoadSettings() {
  if (options.config.empty()) {
    auto started = EmbeddedFleet::Start();
    if (!started.ok()) {
      return Failed("cannot start the embedded fleet: " + std::string(started.status().message()));
    }
    embedded = std::move(*started);
    settings = embedded->settings();
    LogInfo(
        "narwhal-serve: no --config given: serving the embedded simulated fleet "
        "(2 prefill + 2 decode narwhal-sim engines on loopback)");
  } else {
    config_file.emplace(options.config);
    auto loaded = config_file->Load();
    if (!loaded.ok()) return Failed(std::string(loaded.status().message()));
    settings = std::move(*loaded);
  }
  Override(&settings);
  // TLS on every listener (tls.*). The loader checked the files; they are
  // read once more here, for the listeners, before anything is bound.
  if (settings.tls.enabled()) {
    auto pem = LoadTlsFiles(settings.tls.cert_file, settings.tls.key_file);
    if (!pem.ok()) {
      return Failed("config " + options.config + ": " + std::string(pem.status().message()));
    }
    tls_pem = std::move(*pem);
  }
  return absl::OkStatus();
}

absl::Status Server::Parts::OpenFiles() {
  if (!options.journal.empty()) {
    auto opened = router::Journal::Open(options.journal);
    if (!opened.ok()) return Failed(std::string(opened.status().message()));
    journal = std::move(*opened);
  }
  if (!options.access_log.empty()) {
    auto opened = router::AccessLog::Open(options.access_log);
    if (!opened.ok()) return Failed(std::string(opened.status().message()));
    access_log = std::move(*opened);
    LogInfo("narwhal-serve: access log: one line per finished request to " +
            (options.access_log == "-" ? std::string("stdout") : options.access_log));
  }
  metrics = std::make_unique<router::Metrics>(registry);
  if (settings.tracing.enabled()) {
    auto exporter = OtlpExporter::Start(settings.tracing, BuildVersion(), &registry);
    if (!exporter.ok()) return Failed(std::string(exporter.status().message()));
    span_exporter = std::move(*exporter);
  }
  door_options = HttpDoorOptionsFrom(settings);
  if (tls_pem) {
    auto context = TlsServerContext::Create(*tls_pem, &registry);
    if (!context.ok()) return Failed(std::string(context.status().message()));
    door_options.tls = std::move(*context);
    auto grpc_context =
        TlsServerContext::Create(*tls_pem, &registry, TlsServerContext::Door::kGrpc);
    if (!grpc_context.ok()) return Failed(std::string(grpc_context.status().message()));
    grpc_tls = std::move(*grpc_context);
    LogInfo("narwhal-serve: TLS on the HTTP, gRPC and admin listeners (tls.cert_file " +
            settings.tls.cert_file + ")");
  }
  grpc_credentials = ListenerCredentials(tls_pem ? &*tls_pem : nullptr);
  return absl::OkStatus();
}

void Server::Parts::BuildCore() {
  engines::LoopPlacementOptions placement;
  placement.policy = settings.serving.loop_placement == router::LoopPlacementPolicy::kSpread
                         ? engines::Placement::kSpread
                         : engines::Placement::kPack;
  loops = std::make_unique<engines::IoLoops>(settings.serving.io_threads, placement);
  engine_client =
      std::make_unique<engines::BeastEngineClient>(EngineClientOptions(settings), clock);
  fleet = std::make_unique<router::Fleet>(settings, clock, metrics.get(), journal.get(), &events);
  // What requests report is applied on the first loop, off their path.
  fleet->SetOwnerExecutor(loops->executor(0));
  router = std::make_unique<router::Router>(settings, *engine_client, *fleet, clock, metrics.get(),
                                            journal.get(), std::random_device{}(), &journal_status);
  router->SetAccessLog(access_log.get());
  router->SetSpanSink(span_exporter.get());
  live = std::make_unique<router::LiveSettings>(settings);
  router->SetLiveSettings(live.get());

  // DNS groups (B24): resolved on the first loop with c-ares, their members
  // joining and leaving the fleet.
  engines::IoLoops& io = *loops;
  dns_groups = std::make_unique<router::DnsGroups>(
      fleet->admin(), clock, metrics.get(), loops->executor(0),
      [&io](const std::vector<std::string>& servers)
          -> absl::StatusOr<std::unique_ptr<router::DnsResolver>> {
        auto made = router::CaresResolver::Create(io.executor(0), {.servers = servers});
        if (!made.ok()) return made.status();
        return std::unique_ptr<router::DnsResolver>(std::move(*made));
      });
  dns_groups->SetGroups(settings);
  dns_groups->Start();

  // Reloads (B20): SIGHUP, a change of the file, the admin ReloadConfig.
  if (config_file) {
    reloader = std::make_unique<ConfigReloader>(
        std::move(*config_file), *live, fleet->admin(), metrics.get(),
        [this](router::Settings* s) { Override(s); },
        [this](const router::Settings& s) {
          engine_client->SetOptions(EngineClientOptions(s));
          router->ApplySettings(s);
          dns_groups->SetGroups(s);
        });
    config_file.reset();
  }

  // Breaker probes, readmission and liveness sweeps (B17).
  prober = std::make_unique<router::Prober>(*engine_client, fleet->control(), clock);

  AdminOptions admin_options;
  admin_options.token = EnvOrEmpty(settings.admin.token_env);
  if (!settings.admin.token_env.empty() && admin_options.token.empty()) {
    LogWarning("narwhal-serve: admin.token_env names " + settings.admin.token_env +
               ", which is unset or empty: the admin API requires no token");
  }
  admin_options.max_watchers = static_cast<size_t>(settings.admin.max_watchers);
  admin_options.watch_buffer_bytes = static_cast<size_t>(settings.admin.watch_buffer_bytes);
  admin_options.watch_queue = static_cast<size_t>(settings.admin.watch_queue);
  admin_options.watch_stall_timeout = std::chrono::milliseconds(
      static_cast<long long>(settings.admin.watch_stall_timeout_s * 1000));
  if (reloader) {
    ConfigReloader* r = reloader.get();
    admin_options.reload = [r] { return r->Reload("admin"); };
    admin_options.reload_status = [r] { return r->Status(); };
  }
  router::LiveSettings* current = live.get();
  admin_options.current_settings = [current] {
    std::shared_ptr<const router::ConfigGeneration> g = current->Current();
    return std::shared_ptr<const router::Settings>(g, &g->settings);
  };
  admin = std::make_unique<AdminService>(settings, *fleet, *prober, events, *engine_client,
                                         loops->executor(0), clock, admin_options);
}

absl::Status Server::Parts::RunPreflight() {
  const std::function<bool(double)> keep_waiting =
      options.keep_waiting ? options.keep_waiting : SleepAndGoOn;
  const router::EngineWaitResult waited = router::WaitForEngines(
      settings, *engine_client, loops->executor(0), clock, keep_waiting, options.preflight_wait_s);
  if (waited.interrupted) {
    return absl::CancelledError(
        "narwhal-serve: signal received while waiting for engines: not serving");
  }
  LogInfo("narwhal-serve: running preflight (mesh pairs) against " +
          std::to_string(settings.engines.size()) + " engines");
  const router::PreflightReport report = admin->Preflight(router::PairMode::kMesh, "startup");
  std::istringstream table(report.ToTable());
  for (std::string line; std::getline(table, line);) {
    if (!line.empty()) Log(report.passed ? LogLevel::kInfo : LogLevel::kError, line);
  }
  if (!report.passed) return Failed("preflight failed: not serving");
  LogInfo("narwhal-serve: preflight passed");
  return absl::OkStatus();
}

void Server::Parts::StartChecks() {
  // The control plane (probes, join checks, start-up checks) runs on the
  // first loop, the fleet's owner, over the same engine port as requests.
  const router::KvEventsSettings& kv = settings.kv_events;
  kv_events = std::make_unique<router::kv::KvSubscriber>(
      clock,
      router::kv::KvSubscriberOptions{
          .topic = kv.topic,
          .index = {.block_size = static_cast<uint32_t>(kv.block_size),
                    .max_blocks = static_cast<size_t>(kv.max_blocks_per_engine)},
          .replay_timeout = engines::FromSeconds(kv.replay_timeout_s),
          .rebuild = true,
          .max_held = 4096,
          .decode = {},
          .poll_interval = std::chrono::milliseconds(20)},
      metrics.get());
  monitor = std::make_unique<router::FleetMonitor>(fleet->control(), *prober, loops->executor(0));
  monitor->SetKvSubscriber(kv_events.get());
  fleet->SetKvLookup(kv_events.get());
  monitor->Start();
  // Readiness waits for each role to have an engine that passed a check.
  const double startup_retry_s = std::clamp(settings.recovery.readmit_interval_s, 0.1, 1.0);
  startup_checks = std::make_unique<router::StartupChecks>(
      fleet->control(), *prober, loops->executor(0), engines::FromSeconds(startup_retry_s));
  startup_checks->Start();
  if (reloader) reloader->StartPolling();
  // After a load, the heap it left in malloc's arenas goes back to the system.
  router::Router* r = router.get();
  idle_release = std::make_unique<IdleMemoryRelease>([r] { return r->inflight(); });
}

absl::Status Server::Parts::StartListeners() {
  router::Fleet* f = fleet.get();
  // Probes (listen.health): plaintext whatever tls.* says, apart from the doors.
  if (!settings.listen.health.empty()) {
    probes = std::make_unique<ProbeListener>(
        clock, *loops, [f](std::string* why) { return f->Ready(why); },
        ProbeStartupWindow(settings.engine.connect_timeout_s, settings.engine.health_timeout_s));
    std::string host;
    int port = 0;
    SplitHostPort(settings.listen.health, &host, &port);
    auto bound = probes->Bind(host, port);
    if (!bound.ok()) return Failed(std::string(bound.status().message()));
    probes->Start();
    addresses.health = host + ":" + std::to_string(*bound);
  }

  shim =
      std::make_unique<OpenAiShim>(settings, *router, *fleet, clock, registry,
                                   EnvOrEmpty(settings.serving.api_key_env), *loops, door_options);
  SplitHostPort(settings.listen.http, &addresses.http_host, &addresses.http_port);
  auto bound = shim->Bind(addresses.http_host, addresses.http_port);
  if (!bound.ok()) {
    shim.reset();
    return Failed(std::string(bound.status().message()));
  }
  addresses.http_port = *bound;
  process_metrics = std::make_unique<ProcessMetrics>(registry, BuildVersion(), BuildCommit());
  // Lines the access log dropped because its writer fell behind.
  if (access_log) {
    access_log_dropped = &prometheus::BuildCounter()
                              .Name("narwhal_access_log_dropped_lines_total")
                              .Help("Access log lines dropped because the writer fell behind")
                              .Register(registry)
                              .Add({});
  }
  shim->SetBeforeScrape([this] {
    process_metrics->Refresh();
    if (access_log_dropped != nullptr) {
      const double dropped = static_cast<double>(access_log->dropped());
      if (dropped > access_log_dropped->Value()) {
        access_log_dropped->Increment(dropped - access_log_dropped->Value());
      }
    }
  });
  shim->Start();

  // The gRPC door: narwhal.v1.Inference with health and reflection on the
  // loops; the admin API on a gRPC server of its own, with reflection.
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  EnableGrpcHealthService();
  admin_reflection = std::make_unique<ReflectionV1Service>(
      std::vector<std::string>{narwhal::admin::v1::Admin::service_full_name()});
  grpc_door = std::make_unique<GrpcDoor>(settings, *router, clock, *loops,
                                         EnvOrEmpty(settings.serving.api_key_env),
                                         GrpcDoorOptionsFrom(settings, grpc_tls.get()));
  SplitHostPort(settings.listen.grpc, &addresses.grpc_host, &addresses.grpc_port);
  auto grpc_bound = grpc_door->Bind(addresses.grpc_host, addresses.grpc_port);
  if (!grpc_bound.ok()) {
    grpc_door.reset();
    return Failed(std::string(grpc_bound.status().message()));
  }
  addresses.grpc_port = *grpc_bound;
  grpc_door->Start();

  SplitHostPort(settings.listen.admin, &addresses.admin_host, &addresses.admin_port);
  admin_server = StartGrpcServer(
      settings.listen.admin, [this](grpc::ServerBuilder& b) { b.RegisterService(admin.get()); },
      admin_reflection.get(), grpc_credentials, &addresses.admin_port);
  if (!admin_server) return Failed("cannot bind the admin listener to " + settings.listen.admin);

  // grpc.health.v1 on both gRPC listeners follows /ready.
  admin_health = BuiltInHealth(admin_server.get());
  grpc_health = std::make_unique<GrpcHealth>(
      std::vector<GrpcHealth::Target>{
          {&grpc_door->health(), {"narwhal.v1.Inference"}},
          {admin_health.get(), {narwhal::admin::v1::Admin::service_full_name()}}},
      [f] { return f->Ready(nullptr); });
  return absl::OkStatus();
}

void Server::Parts::StopAll() {
  grpc_health.reset();
  if (grpc_door) {
    // GOAWAY, then the last messages of finished calls, then the rest is cut.
    grpc_door->BeginDrain();
    grpc_door->WaitIdle(clock.Now() + std::chrono::seconds(2));
    grpc_door->StopAccepting();
    grpc_door->Join();
  }
  if (shim) {
    shim->StopAccepting();
    shim->Join();
  }
  if (reloader) reloader->Stop();
  if (dns_groups) dns_groups->Stop();
  if (startup_checks) startup_checks->Stop();
  if (monitor) monitor->Stop();
  if (fleet) fleet->SetKvLookup(nullptr);
  if (kv_events) kv_events->Stop();
  if (probes) probes->Stop();
  if (loops) loops->Stop();
  // Every request has ended and queued its row: put them in the file now
  // (the journal's destructor drains again, after the last event row).
  if (journal) journal->Flush();
  // And its spans: sent once more, bounded by tracing.export_timeout_s.
  if (span_exporter) span_exporter->Stop();
}

absl::StatusOr<std::unique_ptr<Server>> Server::Create(ServerOptions options) {
  auto parts = std::make_unique<Parts>();
  parts->options = std::move(options);
  if (absl::Status s = parts->LoadSettings(); !s.ok()) return s;
  if (absl::Status s = parts->OpenFiles(); !s.ok()) return s;
  parts->BuildCore();
  // --preflight (B18) runs before any listener is bound.
  if (parts->options.preflight) {
    if (absl::Status s = parts->RunPreflight(); !s.ok()) {
      parts->StopAll();
      return s;
    }
  }
  parts->StartChecks();
  if (absl::Status s = parts->StartListeners(); !s.ok()) {
    parts->StopAll();
    return s;
  }
  LogInfo("narwhal-serve: serving model " + parts->settings.model + " with " +
          std::to_string(parts->settings.engines.size()) + " engines");
  return std::unique_ptr<Server>(new Server(std::move(parts)));
}

Server::Server(std::unique_ptr<Parts> parts) : parts_(std::move(parts)) {}

Server::~Server() { Shutdown("shutdown"); }

const ServerAddresses& Server::addresses() const { return parts_->addresses; }

std::string Server::model() const { return parts_->settings.model; }

void Server::Reload(std::string_view why) {
  if (parts_->reloader) {
    parts_->reloader->Reload(std::string(why));
  } else {
    LogInfo("narwhal-serve: " + std::string(why) + ": no --config given, nothing to reload");
  }
}

size_t Server::Shutdown(std::string_view why) {
  if (stopped_) return 0;
  stopped_ = true;
  Parts& p = *parts_;
  // The drain bound of the configuration in force (a reload may change it).
  const double graceful_timeout_s = p.live->Current()->settings.serving.graceful_timeout_s;
  LogInfo("narwhal-serve: " + std::string(why) + ": draining for up to " +
          LogSeconds(graceful_timeout_s));
  // Graceful drain: new requests are refused (503) while admitted ones
  // finish, streams included, for up to serving.graceful_timeout_s; then
  // whatever is left is cancelled and every listener closes.
  const engines::MonoTime drain_deadline = p.clock.Now() + engines::FromSeconds(graceful_timeout_s);
  p.grpc_health->Drain();
  if (p.probes) p.probes->BeginDrain();
  p.shim->BeginDrain();
  // The admin API ends its event streams and pending calls at once.
  p.admin->Shutdown();
  p.admin_server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  const size_t cut =
      p.router->Drain(engines::FromSeconds(graceful_timeout_s), p.loops->executor(0));
  if (cut > 0) {
    LogWarning("narwhal-serve: drain deadline (" + LogSeconds(graceful_timeout_s) +
               ") passed: " + std::to_string(cut) + (cut == 1 ? " request" : " requests") +
               " cut, each ended with a shutting_down error (503; gRPC UNAVAILABLE)");
  } else {
    LogInfo("narwhal-serve: drained: every admitted request finished");
  }
  // The last events of finished requests still reach their clients.
  p.shim->WaitIdle(std::max(drain_deadline, p.clock.Now() + std::chrono::seconds(1)));
  p.StopAll();
  LogInfo("narwhal-serve: stopped");
  return cut;
}

}  // namespace narwhal::server
