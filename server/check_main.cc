// narwhal-check: preflight of a fleet (SPEC §2, B18), the same checks the
// admin RunPreflight RPC runs; and the checks of a fleet file before a live
// reload (SPEC §13, B20).
//
//   narwhal-check --config PATH [--json] [--pairs mesh|ring] [--wait-s N]
//   narwhal-check --config PATH --validate-only
//   narwhal-check --config PATH --diff --admin HOST:PORT [--token-env VAR] [--json]
//
// Prints a table (or, with --json, one JSON document) on stdout. Exit status:
// 0 when every gate passes (the file is valid; a reload would apply), 1 when
// a gate fails or the config is invalid (or a reload would need a restart,
// or the router cannot be asked), 2 on bad arguments.
#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>

#include "engines/http/standalone_engine_client.h"
#include "router/common/clock.h"
#include "router/common/settings_diff.h"
#include "router/fleet/engine_wait.h"
#include "router/fleet/preflight.h"
#include "server/check/running_config.h"
#include "server/config/config_file.h"
#include "server/config/config_loader.h"
#include "server/config/engine_options.h"
#include "server/runtime_tuning.h"
#include "server/tls_files.h"
#include "version/build_info.h"

namespace narwhal::server {
namespace {

constexpr char kUsage[] =
    "usage: narwhal-check --config PATH [--json] [--pairs mesh|ring] [--wait-s N]\n"
    "       narwhal-check --config PATH --validate-only\n"
    "       narwhal-check --config PATH --diff --admin HOST:PORT [--token-env VAR] [--json]\n"
    "  --config PATH       the fleet config file (required)\n"
    "  --json              print one JSON document (default off: a table)\n"
    "  --pairs mesh|ring   which producer/consumer pairs to test (default mesh)\n"
    "  --wait-s N          first wait up to N seconds (default 0: no wait) for engines\n"
    "                      still loading: connection refused or 503 from /health or\n"
    "                      /v1/models\n"
    "  --validate-only     only read and validate the file, as a live reload does, and\n"
    "                      contact no engine (default off)\n"
    "  --diff              print what a reload with the file would change on the router\n"
    "                      at --admin (default off); exit 1 when it needs a restart\n"
    "  --admin HOST:PORT   the router's admin listener, for --diff (default none)\n"
    "  --token-env VAR     environment variable holding the admin token, for --diff\n"
    "                      (default: the file's admin.token_env)\n"
    "  --version           print the version and exit\n"
    "  --help, -h          print this help and exit\n";

enum class Mode { kPreflight, kValidate, kDiff };

struct Args {
  std::string config;
  bool json = false;
  router::PairMode pairs = router::PairMode::kMesh;
  double wait_s = 0;
  Mode mode = Mode::kPreflight;
  std::string admin;
  std::string token_env;
  bool token_env_given = false;
  // Preflight-only flags given (refused with --validate-only and --diff).
  bool preflight_flags = false;
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
      args->preflight_flags = true;
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
                  << "\")\n"
                  << kUsage;
        return ParseResult::kBad;
      }
      args->wait_s = v;
      args->preflight_flags = true;
    } else if (flag == "--admin") {
      if (!value(&args->admin)) return ParseResult::kBad;
    } else if (flag == "--token-env") {
      if (!value(&args->token_env)) return ParseResult::kBad;
      args->token_env_given = true;
    } else if ((flag == "--validate-only" || flag == "--diff") && !has_inline) {
      const Mode mode = flag == "--diff" ? Mode::kDiff : Mode::kValidate;
      if (args->mode != Mode::kPreflight && args->mode != mode) {
        std::cerr << "narwhal-check: --validate-only and --diff exclude each other\n" << kUsage;
        return ParseResult::kBad;
      }
      args->mode = mode;
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
  const auto bad = [](const char* why) {
    std::cerr << "narwhal-check: " << why << "\n" << kUsage;
    return ParseResult::kBad;
  };
  if (args->mode != Mode::kPreflight && args->preflight_flags) {
    return bad("--pairs and --wait-s are for the preflight, not --validate-only or --diff");
  }
  if (args->mode == Mode::kValidate && args->json) return bad("--validate-only takes no --json");
  if (args->mode == Mode::kDiff && args->admin.empty())
    return bad("--diff needs --admin HOST:PORT");
  if (args->mode != Mode::kDiff && (!args->admin.empty() || args->token_env_given)) {
    return bad("--admin and --token-env are for --diff");
  }
  return ParseResult::kOk;
}

// --validate-only: the reload's read and validation of the file
// (ConfigFile::Load), nothing else.
int ValidateOnly(const Args& args) {
  ConfigFile file(args.config);
  const absl::StatusOr<router::Settings> settings = file.Load();
  if (!settings.ok()) {
    std::cerr << "narwhal-check: " << settings.status().message() << "\n";
    return 1;
  }
  std::cout << "narwhal-check: config " << args.config << " is valid\n";
  return 0;
}

void PrintChange(const router::ConfigChange& change) {
  std::cout << change.Summary() << "\n";
  for (const std::string& key : change.restart_keys)
    std::cout << "needs a restart: " << key << "\n";
  for (const std::string& key : change.changed_keys) std::cout << "key changed: " << key << "\n";
  for (const std::string& iid : change.joined) std::cout << "engine joins: " << iid << "\n";
  for (const std::string& iid : change.left) std::cout << "engine leaves: " << iid << "\n";
  for (const router::EngineChange& c : change.changed) {
    std::cout << "engine changes (leaves and joins): " << c.iid << " (";
    for (size_t i = 0; i < c.fields.size(); ++i) std::cout << (i ? ", " : "") << c.fields[i];
    std::cout << ")\n";
  }
}

// --diff: what a reload with the file would change on the running router.
int Diff(const Args& args) {
  ConfigFile file(args.config);
  const absl::StatusOr<router::Settings> candidate = file.Load();
  if (!candidate.ok()) {
    std::cerr << "narwhal-check: " << candidate.status().message() << "\n";
    return 1;
  }
  AdminTarget target;
  target.address = args.admin;
  const std::string token_env = args.token_env_given ? args.token_env : candidate->admin.token_env;
  if (!token_env.empty()) {
    const char* token = std::getenv(token_env.c_str());
    target.token = token != nullptr ? token : "";
  }
  if (candidate->tls.enabled()) {
    // The admin listener speaks TLS with the file's certificate.
    absl::StatusOr<TlsPem> pem = LoadTlsFiles(candidate->tls.cert_file, candidate->tls.key_file);
    if (!pem.ok()) {
      std::cerr << "narwhal-check: config " << args.config << ": " << pem.status().message()
                << "\n";
      return 1;
    }
    target.tls_root_pem = pem->cert_chain;
  }
  const absl::StatusOr<router::Settings> running = FetchRunningSettings(target);
  if (!running.ok()) {
    std::cerr << "narwhal-check: " << running.status().message() << "\n";
    return 1;
  }
  const router::ConfigChange change = router::DiffSettings(*running, *candidate);
  if (args.json) {
    std::cout << change.ToJson().dump(2) << "\n";
  } else {
    PrintChange(change);
  }
  std::cout.flush();
  if (change.needs_restart()) {
    std::cerr << "narwhal-check: a reload with " << args.config
              << " would be refused: " << change.RestartRefusal() << "\n";
    return 1;
  }
  return 0;
}

int Check(const Args& args) {
  signal(SIGPIPE, SIG_IGN);
  if (args.mode == Mode::kValidate) return ValidateOnly(args);
  if (args.mode == Mode::kDiff) return Diff(args);
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
      settings, client.async(), client.executor(), clock,
      [](double s) {
        std::this_thread::sleep_for(std::chrono::duration<double>(s));
        return true;
      },
      args.wait_s);
  const router::PreflightReport report =
      router::RunPreflight(settings, client.async(), client.executor(), clock, args.pairs);
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
