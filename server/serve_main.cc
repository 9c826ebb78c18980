// narwhal-serve: the router (SPEC §2): its arguments and signals; the
// process itself is a Server (server/server.h).
#include <absl/status/statusor.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>

#include "router/common/log.h"
#include "server/http/openai_shim.h"
#include "server/log.h"
#include "server/runtime_tuning.h"
#include "server/server.h"
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

  ServerOptions options;
  options.config = args.config;
  options.http = args.http;
  options.grpc = args.grpc;
  options.admin = args.admin;
  options.health = args.health;
  options.journal = args.journal;
  options.access_log = args.access_log;
  options.preflight = args.preflight;
  options.preflight_wait_s = args.preflight_wait_s;
  options.keep_waiting = [&signals](double s) { return !SignalWithin(signals, s); };
  absl::StatusOr<std::unique_ptr<Server>> server = Server::Create(std::move(options));
  if (!server.ok()) {
    if (absl::IsCancelled(server.status())) {
      LogInfo(std::string(server.status().message()));
      return 0;
    }
    LogError(std::string(server.status().message()));
    return 1;
  }
  const ServerAddresses& at = (*server)->addresses();
  const std::string health = at.health.empty() ? "" : " health=" + at.health;
  std::printf("narwhal-serve ready http=%s:%d grpc=%s:%d admin=%s:%d%s\n", at.http_host.c_str(),
              at.http_port, at.grpc_host.c_str(), at.grpc_port, at.admin_host.c_str(),
              at.admin_port, health.c_str());
  std::fflush(stdout);

  int received = 0;
  while (true) {
    sigwait(&blocked, &received);
    if (received != SIGHUP) break;
    (*server)->Reload("SIGHUP");
  }
  (*server)->Shutdown(received == SIGTERM ? "SIGTERM" : "SIGINT");
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
