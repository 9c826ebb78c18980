// narwhal-serve: the router (SPEC §2).
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <prometheus/counter.h>
#include <prometheus/registry.h>
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>

#include "engines/http/beast_engine_client.h"
#include "engines/http/io_loops.h"
#include "engines/sync_engine_client.h"
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
#include "server/grpc/grpc_health.h"
#include "server/grpc/grpc_reflection.h"
#include "server/grpc/inference_service.h"
#include "server/http/openai_shim.h"
#include "server/http/tls_context.h"
#include "server/idle_memory_release.h"
#include "server/log.h"
#include "server/probe_listener.h"
#include "server/process_metrics.h"
#include "server/runtime_tuning.h"
#include "server/status_table.h"
#include "server/tls_files.h"
#include "version/build_info.h"

namespace narwhal::server {
namespace {

constexpr char kUsage[] =
    "usage: narwhal-serve [--config PATH] [--http HOST:PORT] [--grpc HOST:PORT]\n"
    "                     [--admin HOST:PORT] [--health HOST:PORT] [--journal PATH]\n"
    "                     [--preflight] [--preflight-wait-s N] [--log-level LEVEL]\n"
    "                     [--log-format text|json] [--access-log PATH|-]\n"
    "  --config PATH       the fleet config file (default none: the embedded simulated\n"
    "                      fleet, 2 prefill + 2 decode engines on loopback)\n"
    "  --http HOST:PORT    HTTP listener, overrides listen.http (default 127.0.0.1:8000)\n"
    "  --grpc HOST:PORT    gRPC inference listener, overrides listen.grpc\n"
    "                      (default 127.0.0.1:50051)\n"
    "  --admin HOST:PORT   gRPC admin listener, overrides listen.admin\n"
    "                      (default 127.0.0.1:50052)\n"
    "  --health HOST:PORT  plaintext probe listener (GET /health, /ready, /serving;\n"
    "                      never TLS), overrides listen.health (default none)\n"
    "  --journal PATH      append one JSON row per request and fleet event\n"
    "                      (default none: no journal)\n"
    "  --preflight         run the mesh preflight before serving; exit 1 if it fails\n"
    "                      (default off)\n"
    "  --preflight-wait-s N  with --preflight, first wait up to N seconds (default 0:\n"
    "                      no wait) for engines still loading: connection refused or\n"
    "                      503 from /health or /v1/models\n"
    "  --log-level LEVEL   debug, info, warn or error: the least severe line logged\n"
    "                      (default info)\n"
    "  --log-format FMT    text or json: one line per event on stderr (default text)\n"
    "  --access-log PATH   one JSON line per finished request, no request contents, to\n"
    "                      PATH or - for stdout (default none: no access log)\n"
    "  --version           print the version and exit\n"
    "  --help, -h          print this help and exit\n"
    "Port 0 picks a free port; the ready line on stdout names the bound ones.\n";

// A finite number >= 0 (at most a day).
bool ParseSeconds(const std::string& text, double* out) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !(v >= 0) || v > 86400) return false;
  *out = v;
  return true;
}

// Waits up to `s` seconds for one of `signals` (blocked in every thread);
// true when one arrived (it is consumed).
bool SignalWithin(const sigset_t& signals, double s) {
  timespec ts;
  ts.tv_sec = static_cast<time_t>(s);
  ts.tv_nsec = static_cast<long>((s - static_cast<double>(ts.tv_sec)) * 1e9);
  return sigtimedwait(&signals, nullptr, &ts) > 0;
}

struct Args {
  std::string config;
  std::string http, grpc, admin, health;
  std::string journal;
  std::string access_log;
  bool preflight = false;
  double preflight_wait_s = 0;
  LogLevel log_level = LogLevel::kInfo;
  router::LogFormat log_format = router::LogFormat::kText;
};

// Returns false (after printing why) on bad arguments.
bool ParseArgs(int argc, char** argv, Args* args) {
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto value = [&](std::string* out) {
      if (i + 1 >= argc) {
        std::cerr << "narwhal-serve: " << flag << " needs a value\n" << kUsage;
        return false;
      }
      *out = argv[++i];
      return true;
    };
    if (flag == "--config") {
      if (!value(&args->config)) return false;
    } else if (flag == "--http") {
      if (!value(&args->http)) return false;
    } else if (flag == "--grpc") {
      if (!value(&args->grpc)) return false;
    } else if (flag == "--admin") {
      if (!value(&args->admin)) return false;
    } else if (flag == "--health") {
      if (!value(&args->health)) return false;
    } else if (flag == "--journal") {
      if (!value(&args->journal)) return false;
    } else if (flag == "--access-log") {
      if (!value(&args->access_log)) return false;
      if (args->access_log.empty()) {
        std::cerr << "narwhal-serve: --access-log needs a path or -\n" << kUsage;
        return false;
      }
    } else if (flag == "--preflight") {
      args->preflight = true;
    } else if (flag == "--preflight-wait-s") {
      std::string text;
      if (!value(&text)) return false;
      if (!ParseSeconds(text, &args->preflight_wait_s)) {
        std::cerr << "narwhal-serve: --preflight-wait-s must be a number of seconds >= 0 (got \""
                  << text << "\")\n"
                  << kUsage;
        return false;
      }
    } else if (flag == "--log-level") {
      std::string level;
      if (!value(&level)) return false;
      if (!router::ParseLogLevel(level, &args->log_level)) {
        std::cerr << "narwhal-serve: --log-level must be debug, info, warn or error (got \""
                  << level << "\")\n"
                  << kUsage;
        return false;
      }
    } else if (flag == "--log-format") {
      std::string format;
      if (!value(&format)) return false;
      if (!router::ParseLogFormat(format, &args->log_format)) {
        std::cerr << "narwhal-serve: --log-format must be text or json (got \"" << format << "\")\n"
                  << kUsage;
        return false;
      }
    } else if (flag == "--help" || flag == "-h") {
      std::cout << kUsage;
      std::exit(0);
    } else if (flag == "--version") {
      std::cout << VersionLine("narwhal-serve") << "\n";
      std::exit(0);
    } else {
      std::cerr << "narwhal-serve: unknown argument " << flag << "\n" << kUsage;
      return false;
    }
  }
  if (args->preflight_wait_s > 0 && !args->preflight) {
    std::cerr << "narwhal-serve: --preflight-wait-s needs --preflight\n" << kUsage;
    return false;
  }
  for (const std::string* address : {&args->http, &args->grpc, &args->admin, &args->health}) {
    std::string host;
    int port = 0;
    if (!address->empty() && !SplitHostPort(*address, &host, &port)) {
      std::cerr << "narwhal-serve: bad listener address " << *address << " (want HOST:PORT)\n";
      return false;
    }
  }
  return true;
}

// A gRPC server for `service` on `address` (port 0 picks one; *bound gets
// the actual port), or null when it cannot bind. A second server on the same
// port fails instead of sharing it (no SO_REUSEPORT). `max_receive_bytes`
// > 0 replaces gRPC's bound on a received message.
// `service` and grpc.reflection.v1 (`reflection`) on `address`; gRPC's
// health and v1alpha reflection services join every server by themselves.
std::unique_ptr<grpc::Server> StartGrpcServer(
    const std::string& address, grpc::Service* service, ReflectionV1Service* reflection,
    const std::shared_ptr<grpc::ServerCredentials>& credentials, int* bound,
    int max_receive_bytes = 0) {
  grpc::ServerBuilder builder;
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  if (max_receive_bytes > 0) builder.SetMaxReceiveMessageSize(max_receive_bytes);
  builder.AddListeningPort(address, credentials, bound);
  builder.RegisterService(service);
  builder.RegisterService(reflection);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server && *bound == 0) server.reset();
  return server;
}

int Serve(const Args& args) {
  // Signals are taken synchronously by this thread (sigwait); every thread
  // started from here inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  // SIGHUP reloads the config (B20); it is blocked too, and taken by the
  // same wait as the signals that stop the router.
  sigset_t blocked = signals;
  sigaddset(&blocked, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &blocked, nullptr);
  signal(SIGPIPE, SIG_IGN);

  std::unique_ptr<EmbeddedFleet> embedded;
  router::Settings settings;
  std::optional<ConfigFile> config_file;  // with --config: the live file (B20)
  if (args.config.empty()) {
    auto started = EmbeddedFleet::Start();
    if (!started.ok()) {
      LogError("narwhal-serve: cannot start the embedded fleet: " +
               std::string(started.status().message()));
      return 1;
    }
    embedded = std::move(*started);
    settings = embedded->settings();
    LogInfo(
        "narwhal-serve: no --config given: serving the embedded simulated fleet "
        "(2 prefill + 2 decode narwhal-sim engines on loopback)");
  } else {
    config_file.emplace(args.config);
    auto loaded = config_file->Load();
    if (!loaded.ok()) {
      LogError("narwhal-serve: " + std::string(loaded.status().message()));
      return 1;
    }
    settings = std::move(*loaded);
  }
  // The command line's listeners win over the file's, at start and at every
  // reload.
  auto overrides = [&args](router::Settings* s) {
    if (!args.http.empty()) s->listen.http = args.http;
    if (!args.grpc.empty()) s->listen.grpc = args.grpc;
    if (!args.admin.empty()) s->listen.admin = args.admin;
    if (!args.health.empty()) s->listen.health = args.health;
  };
  overrides(&settings);

  // TLS on every listener (tls.*). The loader checked the files; they are
  // read once more here, for the listeners, before anything is bound.
  std::optional<TlsPem> tls_pem;
  if (settings.tls.enabled()) {
    auto pem = LoadTlsFiles(settings.tls.cert_file, settings.tls.key_file);
    if (!pem.ok()) {
      LogError("narwhal-serve: config " + args.config + ": " + std::string(pem.status().message()));
      return 1;
    }
    tls_pem = std::move(*pem);
  }

  std::unique_ptr<router::Journal> journal;
  if (!args.journal.empty()) {
    auto opened = router::Journal::Open(args.journal);
    if (!opened.ok()) {
      LogError("narwhal-serve: " + std::string(opened.status().message()));
      return 1;
    }
    journal = std::move(*opened);
  }

  std::unique_ptr<router::AccessLog> access_log;
  if (!args.access_log.empty()) {
    auto opened = router::AccessLog::Open(args.access_log);
    if (!opened.ok()) {
      LogError("narwhal-serve: " + std::string(opened.status().message()));
      return 1;
    }
    access_log = std::move(*opened);
    LogInfo("narwhal-serve: access log: one line per finished request to " +
            (args.access_log == "-" ? std::string("stdout") : args.access_log));
  }

  prometheus::Registry registry;
  router::Metrics metrics(registry);
  HttpDoorOptions door_options = HttpDoorOptionsFrom(settings);
  if (tls_pem) {
    auto context = TlsServerContext::Create(*tls_pem, &registry);
    if (!context.ok()) {
      LogError("narwhal-serve: " + std::string(context.status().message()));
      return 1;
    }
    door_options.tls = std::move(*context);
    LogInfo("narwhal-serve: TLS on the HTTP, gRPC and admin listeners (tls.cert_file " +
            settings.tls.cert_file + ")");
  }
  const std::shared_ptr<grpc::ServerCredentials> grpc_credentials =
      ListenerCredentials(tls_pem ? &*tls_pem : nullptr);
  router::RealClock clock;
  // The data plane: client connections, attempt loops and engine legs run
  // on these loops, one request per loop from its first byte to its last.
  engines::IoLoops loops(settings.serving.io_threads);
  const engines::HttpEngineClientOptions engine_options = EngineClientOptions(settings);
  engines::BeastEngineClient engine_client(engine_options, clock);
  // Probes, readmission checks and preflight call the same adapter from
  // their own threads.
  engines::SyncEngineClient control_client(engine_client, loops.executor(0));
  router::EventBus events;
  router::Fleet fleet(settings, clock, &metrics, journal.get(), &events);
  // What requests report is applied on the first loop, off their path.
  fleet.SetOwnerExecutor(loops.executor(0));
  // The journal rows carry the statuses of the one status table.
  const StatusTableJournal journal_status;
  router::Router router(settings, engine_client, fleet, clock, &metrics, journal.get(),
                        std::random_device{}(), &journal_status);
  router.SetAccessLog(access_log.get());
  // The config generation in force; requests keep the one they were
  // admitted under (B20).
  router::LiveSettings live(settings);
  router.SetLiveSettings(&live);

  // DNS groups (B24): resolved on the first loop with c-ares, their members
  // joining and leaving the fleet.
  router::DnsGroups dns_groups(fleet, clock, &metrics, loops.executor(0),
                               [&loops](const std::vector<std::string>& servers)
                                   -> absl::StatusOr<std::unique_ptr<router::DnsResolver>> {
                                 auto made = router::CaresResolver::Create(loops.executor(0),
                                                                           {.servers = servers});
                                 if (!made.ok()) return made.status();
                                 return std::unique_ptr<router::DnsResolver>(std::move(*made));
                               });
  dns_groups.SetGroups(settings);
  dns_groups.Start();

  // Reloads (B20): SIGHUP, a change of the file, the admin ReloadConfig.
  std::unique_ptr<ConfigReloader> reloader;
  if (config_file) {
    reloader = std::make_unique<ConfigReloader>(
        std::move(*config_file), live, fleet, &metrics, overrides,
        [&router, &dns_groups, &engine_client](const router::Settings& s) {
          engine_client.SetOptions(EngineClientOptions(s));
          router.ApplySettings(s);
          dns_groups.SetGroups(s);
        });
  }

  // Breaker probes, readmission and liveness sweeps (B17).
  router::Prober prober(control_client, fleet, clock);

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
    admin_options.reload = [&reloader] { return reloader->Reload("admin"); };
    admin_options.reload_status = [&reloader] { return reloader->Status(); };
  }
  admin_options.current_settings = [&live] {
    std::shared_ptr<const router::ConfigGeneration> g = live.Current();
    return std::shared_ptr<const router::Settings>(g, &g->settings);
  };
  AdminService admin(settings, fleet, prober, events, control_client, clock, admin_options);

  // --preflight (B18) runs before any listener is bound.
  if (args.preflight) {
    const router::EngineWaitResult waited = router::WaitForEngines(
        settings, control_client, clock, [&signals](double s) { return !SignalWithin(signals, s); },
        args.preflight_wait_s);
    if (waited.interrupted) {
      LogInfo("narwhal-serve: signal received while waiting for engines: not serving");
      return 0;
    }
    LogInfo("narwhal-serve: running preflight (mesh pairs) against " +
            std::to_string(settings.engines.size()) + " engines");
    const router::PreflightReport report = admin.Preflight(router::PairMode::kMesh, "startup");
    std::istringstream table(report.ToTable());
    for (std::string line; std::getline(table, line);) {
      if (!line.empty()) Log(report.passed ? LogLevel::kInfo : LogLevel::kError, line);
    }
    if (!report.passed) {
      LogError("narwhal-serve: preflight failed: not serving");
      return 1;
    }
    LogInfo("narwhal-serve: preflight passed");
  }

  router::FleetMonitor monitor(fleet, prober);
  monitor.Start();
  // Readiness waits for each role to have an engine that passed a check.
  const double startup_retry_s = std::clamp(settings.recovery.readmit_interval_s, 0.1, 1.0);
  router::StartupChecks startup_checks(
      fleet, prober, std::chrono::milliseconds(static_cast<long long>(startup_retry_s * 1000)));
  startup_checks.Start();
  if (reloader) reloader->StartPolling();
  // After a load, the heap it left in malloc's arenas goes back to the system.
  IdleMemoryRelease idle_release([&router] { return router.inflight(); });

  // Probes (listen.health): plaintext whatever tls.* says, apart from the doors.
  std::unique_ptr<ProbeListener> probes;
  std::string health_line;
  if (!settings.listen.health.empty()) {
    probes = std::make_unique<ProbeListener>(
        clock, loops, [&fleet](std::string* why) { return fleet.Ready(why); },
        ProbeStartupWindow(settings.engine.connect_timeout_s, settings.engine.health_timeout_s));
    std::string host;
    int port = 0;
    SplitHostPort(settings.listen.health, &host, &port);
    auto bound_health = probes->Bind(host, port);
    if (!bound_health.ok()) {
      LogError("narwhal-serve: " + std::string(bound_health.status().message()));
      return 1;
    }
    probes->Start();
    health_line = " health=" + host + ":" + std::to_string(*bound_health);
  }

  OpenAiShim shim(settings, router, fleet, clock, registry,
                  EnvOrEmpty(settings.serving.api_key_env), loops, door_options);
  std::string http_host;
  int http_port = 0;
  SplitHostPort(settings.listen.http, &http_host, &http_port);
  auto bound = shim.Bind(http_host, http_port);
  if (!bound.ok()) {
    LogError("narwhal-serve: " + std::string(bound.status().message()));
    return 1;
  }
  ProcessMetrics process_metrics(registry, BuildVersion(), BuildCommit());
  // Lines the access log dropped because its writer fell behind.
  prometheus::Counter* access_log_dropped =
      access_log ? &prometheus::BuildCounter()
                        .Name("narwhal_access_log_dropped_lines_total")
                        .Help("Access log lines dropped because the writer fell behind")
                        .Register(registry)
                        .Add({})
                 : nullptr;
  shim.SetBeforeScrape([&process_metrics, &access_log, access_log_dropped] {
    process_metrics.Refresh();
    if (access_log_dropped != nullptr) {
      const double dropped = static_cast<double>(access_log->dropped());
      if (dropped > access_log_dropped->Value()) {
        access_log_dropped->Increment(dropped - access_log_dropped->Value());
      }
    }
  });
  shim.Start();

  // gRPC inference and admin APIs on their own listeners, with server
  // reflection.
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  EnableGrpcHealthService();
  ReflectionV1Service inference_reflection({narwhal::v1::Inference::service_full_name()});
  ReflectionV1Service admin_reflection({narwhal::admin::v1::Admin::service_full_name()});
  InferenceService inference(settings, router, clock, loops,
                             EnvOrEmpty(settings.serving.api_key_env));
  std::string grpc_host;
  int grpc_port = 0;
  SplitHostPort(settings.listen.grpc, &grpc_host, &grpc_port);
  int grpc_bound = 0;
  std::unique_ptr<grpc::Server> grpc_server =
      StartGrpcServer(settings.listen.grpc, &inference, &inference_reflection, grpc_credentials,
                      &grpc_bound, GrpcMaxReceiveBytes(settings));
  if (!grpc_server) {
    LogError("narwhal-serve: cannot bind the gRPC listener to " + settings.listen.grpc);
    shim.StopAccepting();
    shim.Join();
    return 1;
  }

  std::string admin_host;
  int admin_port = 0;
  SplitHostPort(settings.listen.admin, &admin_host, &admin_port);
  int admin_bound = 0;
  std::unique_ptr<grpc::Server> admin_server = StartGrpcServer(
      settings.listen.admin, &admin, &admin_reflection, grpc_credentials, &admin_bound);
  if (!admin_server) {
    LogError("narwhal-serve: cannot bind the admin listener to " + settings.listen.admin);
    shim.StopAccepting();
    grpc_server->Shutdown(std::chrono::system_clock::now());
    shim.Join();
    return 1;
  }

  // grpc.health.v1 on both gRPC listeners follows /ready.
  GrpcHealth grpc_health({{grpc_server.get(), {narwhal::v1::Inference::service_full_name()}},
                          {admin_server.get(), {narwhal::admin::v1::Admin::service_full_name()}}},
                         [&fleet] { return fleet.Ready(nullptr); });

  std::printf("narwhal-serve ready http=%s:%d grpc=%s:%d admin=%s:%d%s\n", http_host.c_str(),
              *bound, grpc_host.c_str(), grpc_bound, admin_host.c_str(), admin_bound,
              health_line.c_str());
  std::fflush(stdout);
  LogInfo("narwhal-serve: serving model " + settings.model + " with " +
          std::to_string(settings.engines.size()) + " engines");

  int received = 0;
  while (true) {
    sigwait(&blocked, &received);
    if (received != SIGHUP) break;
    if (reloader) {
      reloader->Reload("SIGHUP");
    } else {
      LogInfo("narwhal-serve: SIGHUP: no --config given, nothing to reload");
    }
  }
  // The drain bound of the configuration in force (a reload may change it).
  const double graceful_timeout_s = live.Current()->settings.serving.graceful_timeout_s;
  LogInfo(std::string("narwhal-serve: ") + (received == SIGTERM ? "SIGTERM" : "SIGINT") +
          ": draining for up to " + LogSeconds(graceful_timeout_s));
  // Graceful drain: new requests are refused (503) while admitted ones
  // finish, streams included, for up to serving.graceful_timeout_s; then
  // whatever is left is cancelled and every listener closes.
  const engines::MonoTime drain_deadline = clock.Now() + engines::FromSeconds(graceful_timeout_s);
  grpc_health.Drain();
  if (probes) probes->BeginDrain();
  shim.BeginDrain();
  // The admin API ends its event streams and pending calls at once.
  admin.Shutdown();
  admin_server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  const size_t cut = router.Drain(engines::FromSeconds(graceful_timeout_s), loops.executor(0));
  if (cut > 0) {
    LogWarning("narwhal-serve: drain deadline (" + LogSeconds(graceful_timeout_s) +
               ") passed: " + std::to_string(cut) + (cut == 1 ? " request" : " requests") +
               " cut, each ended with a shutting_down error (503; gRPC UNAVAILABLE)");
  } else {
    LogInfo("narwhal-serve: drained: every admitted request finished");
  }
  // The last events of finished requests still reach their clients.
  shim.WaitIdle(std::max(drain_deadline, clock.Now() + std::chrono::seconds(1)));
  grpc_server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  shim.StopAccepting();
  shim.Join();
  if (reloader) reloader->Stop();
  dns_groups.Stop();
  startup_checks.Stop();
  monitor.Stop();
  if (probes) probes->Stop();
  loops.Stop();
  // Every request has ended and queued its row: put them in the file now
  // (the journal's destructor drains again, after the last event row).
  if (journal) journal->Flush();
  LogInfo("narwhal-serve: stopped");
  return 0;
}

}  // namespace
}  // namespace narwhal::server

int main(int argc, char** argv) {
  narwhal::server::TuneRuntime();
  narwhal::server::Args args;
  if (!narwhal::server::ParseArgs(argc, argv, &args)) return 2;
  narwhal::router::SetLogLevel(args.log_level);
  narwhal::router::SetLogFormat(args.log_format);
  return narwhal::server::Serve(args);
}
