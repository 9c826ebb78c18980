// The fleet configuration as one immutable, typed value (SPEC §3).
//
// server/config_loader parses and validates the JSON fleet file into this
// struct once at start-up; every component receives it (or the part it needs)
// by const reference and never sees raw JSON. Defaults live here, once; the
// README's configuration table is checked against them by a test.
#ifndef NARWHAL_ROUTER_SETTINGS_H_
#define NARWHAL_ROUTER_SETTINGS_H_

#include <optional>
#include <string>
#include <vector>

namespace narwhal::router {

// Which legs an engine may serve.
enum class Role { kPrefill, kDecode, kBoth };

const char* RoleName(Role role);
bool CanPrefill(Role role);
bool CanDecode(Role role);

struct EngineSettings {
  std::string iid;   // unique engine id (required)
  std::string url;   // base URL, "http://host:port" (required)
  Role role = Role::kBoth;
};

// The pinned engine contract (B17/B18). Absent from the file = not pinned.
struct EngineContract {
  std::string vllm_version;                     // exact /version string (required)
  std::optional<std::string> model;             // default: the fleet's model
  std::optional<long long> max_model_len;       // /v1/models[].max_model_len
  std::string connector = "NixlConnector";
  std::optional<std::string> system_fingerprint;  // exact match when set
};

struct ListenSettings {
  std::string http = "127.0.0.1:8000";
  std::string grpc = "127.0.0.1:50051";
  std::string admin = "127.0.0.1:50052";
};

struct ServingSettings {
  int max_attempts = 1;                 // 1..3 complete prefill+decode attempts
  double request_timeout_s = 600;       // end-to-end deadline, > 0
  double prefill_timeout_s = 120;       // one prefill leg, > 0 and <= request timeout
  double handoff_timeout_s = 0;         // max KV handoff age; 0 = request deadline only
  double retry_budget = 10;             // shared retry-credit pool size (start and cap), >= 0
  double retry_replenish = 0.1;         // credits per successful request, 0..1
  double retry_base_s = 0.1;            // full-jitter backoff base, >= 0
  double retry_cap_s = 1.0;             // full-jitter backoff cap, >= base
  int max_inflight = 768;               // admitted client requests at once, >= 1
  long long max_request_bytes = 4194304;  // larger bodies: 413; 1 KiB .. 1 GiB
  double graceful_timeout_s = 30;       // SIGTERM drain, >= 0
  std::string api_key_env;              // env var holding the client API key; "" = none
  // The data plane's event-loop threads (client connections, attempt loops,
  // engine legs); 0 = one per core. 0..64.
  int io_threads = 0;
  // Open HTTP client connections; a connection beyond it is refused at once
  // (a fixed 503, then closed). 1..1000000.
  int max_connections = 4096;
  // Request line plus header fields of one HTTP request; beyond: 431.
  // 1 KiB .. 1 MiB.
  int max_header_bytes = 65536;
  // Header fields of one HTTP request; beyond: 431. 1..10000.
  int max_headers = 100;
  // From a request's first byte to the end of its headers (and the longest
  // silence while its body arrives); expiry closes the connection. > 0.
  double header_timeout_s = 10;
  // An idle keep-alive connection between requests (and the bound on writing
  // one response) before it is closed. > 0.
  double keepalive_timeout_s = 60;
};

struct AdminSettings {
  std::string token_env;  // env var holding the admin bearer token; "" = none
};

struct EngineIoSettings {
  double first_token_timeout_s = 2.5;   // B12; also each probe leg's budget, > 0
  double decode_read_timeout_s = 10;    // B13; 0 = request deadline bounds the stream
  double connect_timeout_s = 10;        // TCP connect, > 0
  double health_timeout_s = 5;          // health / identity requests, > 0
  std::string connector = "NixlConnector";
  std::string api_key_env;              // env var holding the Bearer token for engines
};

enum class RestartPolicy { kIndividual, kWholeWave };

struct RecoverySettings {
  int eject_after = 3;                  // consecutive same-class failures, >= 1
  double failure_quarantine_s = 0;      // B15 timed hold; 0 = off
  double readmit_interval_s = 5;        // probe cadence for held/ejected engines, > 0
  double liveness_interval_s = 10;      // idle health sweeps; 0 = off
  int liveness_misses = 2;              // consecutive misses before ejection, >= 1
  RestartPolicy engine_restart_policy = RestartPolicy::kIndividual;
};

struct Settings {
  std::string model;                    // served model name (required)
  ListenSettings listen;
  std::vector<EngineSettings> engines;  // non-empty, unique iids
  std::optional<EngineContract> engine_contract;
  ServingSettings serving;
  AdminSettings admin;
  EngineIoSettings engine;
  RecoverySettings recovery;
};

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_SETTINGS_H_
