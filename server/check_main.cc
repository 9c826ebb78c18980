// narwhal-check: preflight of a fleet (SPEC §2, B18), the same checks the
// admin RunPreflight RPC runs.
//
//   narwhal-check --config PATH [--json] [--pairs mesh|ring] [--wait-s N]
//
// Prints a table (or, with --json, one JSON document) on stdout. Exit status:
// 0 when every gate passes, 1 when a gate fails or the config is invalid,
// 2 on bad arguments.
#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>

#include "engines/http/standalone_engine_client.h"
#include "router/common/clock.h"
#include "router/fleet/engine_wait.h"
#include "router/fleet/preflight.h"
#include "server/config_loader.h"
#include "server/engine_options.h"
#include "server/runtime_tuning.h"
#include "version/build_info.h"

namespace narwhal::server {
namespace {

constexpr char kUsage[] =
    "usage: narwhal-check --config PATH [--json] [--pairs mesh|ring] [--wait-s N]\n"
    "  --config PATH       the fleet config file (required)\n"
    "  --json              print one JSON document (default off: a table)\n"
    "  --pairs mesh|ring   which producer/consumer pairs to test (default mesh)\n"
    "  --wait-s N          first wait up to N seconds (default 0: no wait) for engines\n"
    "                      still loading: connection refused or 503 from /health or\n"
    "                      /v1/models\n"
    "  --version           print the version and exit\n"
    "  --help, -h          print this help and exit\n";

struct Args {
  std::string config;
  bool json = false;
  router::PairMode pairs = router::PairMode::kMesh;
  double wait_s = 0;
};

enum class ParseResult { kOk, kHelp, kVersion, kBad };

// Flags take their value as the next argument or after '='.
ParseResult ParseArgs(int argc, char** argv, Args* args) {
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    std::string inline_value;
    bool has_inline = false;
    if (const size_t eq = flag.find('='); flag.rfind("--", 0) == 0 && eq != std::string::npos) {
      inline_value = flag.substr(eq + 1);
      flag.resize(eq);
      has_inline = true;
    }
    auto value = [&](std::string* out) {
      if (has_inline) {
        *out = inline_value;
      } else if (i + 1 < argc) {
        *out = argv[++i];
      } else {
        std::cerr << "narwhal-check: " << flag << " needs a value\n" << kUsage;
        return false;
      }
      return true;
    };
    if (flag == "--config") {
      if (!value(&args->config)) return ParseResult::kBad;
      if (args->config.empty()) {
        std::cerr << "narwhal-check: --config needs a value\n" << kUsage;
        return ParseResult::kBad;
      }
    } else if (flag == "--pairs") {
      std::string mode;
      if (!value(&mode)) return ParseResult::kBad;
      if (!router::ParsePairMode(mode, &args->pairs)) {
        std::cerr << "narwhal-check: --pairs must be mesh or ring (got \"" << mode << "\")\n"
                  << kUsage;
        return ParseResult::kBad;
      }
    } else if (flag == "--wait-s") {
      std::string text;
      if (!value(&text)) return ParseResult::kBad;
      char* end = nullptr;
      const double v = std::strtod(text.c_str(), &end);
      if (text.empty() || end != text.c_str() + text.size() || !(v >= 0) || v > 86400) {
        std::cerr << "narwhal-check: --wait-s must be a number of seconds >= 0 (got \"" << text
                  << "\")\n" << kUsage;
        return ParseResult::kBad;
      }
      args->wait_s = v;
    } else if (flag == "--json" && !has_inline) {
      args->json = true;
    } else if ((flag == "--help" || flag == "-h") && !has_inline) {
      return ParseResult::kHelp;
    } else if (flag == "--version" && !has_inline) {
      return ParseResult::kVersion;
    } else {
      std::cerr << "narwhal-check: unknown argument " << argv[i] << "\n" << kUsage;
      return ParseResult::kBad;
    }
  }
  if (args->config.empty()) {
    std::cerr << "narwhal-check: --config is required\n" << kUsage;
    return ParseResult::kBad;
  }
  return ParseResult::kOk;
}

int Check(const Args& args) {
  signal(SIGPIPE, SIG_IGN);
  auto loaded = LoadFleetConfig(args.config);
  if (!loaded.ok()) {
    std::cerr << "narwhal-check: " << loaded.status().message() << "\n";
    return 1;
  }
  const router::Settings& settings = *loaded;

  const engines::HttpEngineClientOptions engine_options = EngineClientOptions(settings);
  engines::StandaloneEngineClient client(engine_options);
  router::RealClock clock;

  router::WaitForEngines(
      settings, client, clock,
      [](double s) {
        std::this_thread::sleep_for(std::chrono::duration<double>(s));
        return true;
      },
      args.wait_s);
  const router::PreflightReport report = router::RunPreflight(settings, client, clock, args.pairs);
  if (args.json) {
    std::cout << report.ToJson().dump(2) << "\n";
  } else {
    std::cout << report.ToTable();
  }
  std::cout.flush();
  return report.passed ? 0 : 1;
}

}  // namespace
}  // namespace narwhal::server

int main(int argc, char** argv) {
  narwhal::server::TuneRuntime();
  narwhal::server::Args args;
  switch (narwhal::server::ParseArgs(argc, argv, &args)) {
    case narwhal::server::ParseResult::kHelp:
      std::cout << narwhal::server::kUsage;
      return 0;
    case narwhal::server::ParseResult::kVersion:
      std::cout << narwhal::VersionLine("narwhal-check") << "\n";
      return 0;
    case narwhal::server::ParseResult::kBad:
      return 2;
    case narwhal::server::ParseResult::kOk:
      break;
  }
  return narwhal::server::Check(args);
}
