// The fleet configuration as one immutable, typed value (SPEC §3).
//
// The schema of the file — keys, types, bounds, meanings — is
// proto/narwhal/config/v1/config.proto. server/config/config_loader parses and
// validates the JSON fleet file into this struct at start-up (and at each
// live reload, into a new one: router/common/settings_diff.h says what
// changed); every component receives it (or the part it needs) by const
// reference and never sees raw JSON. The defaults below are the ones an absent key takes; a test
// (tests/server/readme_config_test.cc) checks that they are the defaults the
// schema documents. Bounds are not repeated here: see the schema.
#ifndef NARWHAL_ROUTER_COMMON_SETTINGS_H_
#define NARWHAL_ROUTER_COMMON_SETTINGS_H_

#include <optional>
#include <string>
#include <vector>

namespace narwhal::router {

// Which legs an engine may serve.
enum class Role { kPrefill, kDecode, kBoth };

const char* RoleName(Role role);
bool CanPrefill(Role role);
bool CanDecode(Role role);

// One entry of `engines`: an engine (`url`) or a DNS group (`dns` and
// `port`), exactly one of the two.
struct EngineSettings {
  std::string iid;  // unique engine id (required); a DNS group's members derive theirs
  std::string url;  // base URL, exactly "http://host:port", unique; "" for a DNS group
  Role role = Role::kBoth;
  std::string kv_engine_id = {};  // the producer's kv_transfer_config engine_id; "" = any
  // A DNS group: every A/AAAA address of `dns` is a member at `port`,
  // "http://ADDR:PORT" named "<iid>-<ADDR>-<PORT>" (characters of ADDR outside
  // [A-Za-z0-9.-] become '-'; SPEC §13), with this entry's role and
  // kv_engine_id.
  std::string dns = {};  // host name as written; "" for an engine given by url
  int port = 0;          // 1-65535 with dns, else 0
  // KV-cache events (SPEC §14): "tcp://host:port" of the engine's publisher
  // and of its replay socket; "" = none. A DNS group's are its members'
  // with each member's address (MemberSettings).
  std::string kv_events = {};
  std::string kv_events_replay = {};
  bool is_dns_group() const { return !dns.empty(); }
};

// The pinned engine contract (B17/B18). Absent from the file = not pinned.
struct EngineContract {
  std::string vllm_version;                       // exact /version string (required)
  std::optional<std::string> model;               // default: the fleet's model
  std::optional<long long> max_model_len;         // /v1/models[].max_model_len
  std::string connector = "NixlConnector";        // a known connector
  std::optional<std::string> system_fingerprint;  // exact match when set
};

struct ListenSettings {
  std::string http = "127.0.0.1:8000";
  std::string grpc = "127.0.0.1:50051";
  std::string admin = "127.0.0.1:50052";
  std::string health;  // plaintext probe listener; empty = none
};

// One tenant of serving.api_keys: its name, where its key comes from, the
// key itself and its own limits (router/tenant_limits).
struct TenantSettings {
  std::string name;     // in the journal, the access log and metrics; never the key
  std::string key_env;  // env var holding the key; "" when read from key_file
  std::string key_file;
  // The key as read at load (start-up or reload). A secret: never logged,
  // journaled or exported (the running config carries key_env/key_file
  // only); "" in a running router's effective configuration.
  std::string key;
  int max_inflight = 0;       // requests admitted at once; 0 = no own bound
  double requests_per_s = 0;  // token bucket rate; 0 = no rate limit
  double burst = 0;           // bucket size (>= 1 when requests_per_s is set)
};

// serving.loop_placement: which data-plane loop takes a new client
// connection (engines/http/loop_placement.h).
enum class LoopPlacementPolicy { kPack, kSpread };

struct ServingSettings {
  int max_attempts = 1;                   // complete prefill+decode attempts
  double request_timeout_s = 600;         // end-to-end deadline
  double prefill_timeout_s = 120;         // one prefill leg, <= request timeout
  double handoff_timeout_s = 0;           // max KV handoff age; 0 = request deadline only
                                          // (the loader derives it from handoff.lease_s)
  double retry_budget = 10;               // shared retry-credit pool size (start and cap)
  double retry_replenish = 0.1;           // credits per successful request
  double retry_base_s = 0.1;              // full-jitter backoff base
  double retry_cap_s = 1.0;               // full-jitter backoff cap, >= base
  int max_inflight = 768;                 // admitted client requests at once
  long long max_request_bytes = 4194304;  // larger bodies: 413
  double graceful_timeout_s = 30;         // SIGTERM drain
  std::string api_key_env;                // env var holding the client API key; "" = none
  // The data plane's event-loop threads (client connections, attempt loops,
  // engine legs); 0 = one per core.
  int io_threads = 0;
  // Which loop takes a new client connection (engines/http/loop_placement.h).
  LoopPlacementPolicy loop_placement = LoopPlacementPolicy::kPack;
  // Open HTTP client connections; a connection beyond it is refused at once
  // (a fixed 503, then closed).
  int max_connections = 4096;
  // Request line plus header fields of one HTTP request; beyond: 431.
  int max_header_bytes = 65536;
  // Header fields of one HTTP request; beyond: 431.
  int max_headers = 100;
  // From a request's first byte to the end of its headers (and the longest
  // silence while its body arrives); expiry closes the connection.
  double header_timeout_s = 10;
  // An idle keep-alive connection between requests (and the bound on writing
  // one response) before it is closed.
  double keepalive_timeout_s = 60;
  // Named client keys (tenants); empty = api_key_env alone (or no
  // authentication). Never both.
  std::vector<TenantSettings> api_keys = {};
};

struct AdminSettings {
  std::string token_env;              // env var holding the admin bearer token; "" = none
  int max_watchers = 64;              // WatchEvents streams open at once
  int watch_buffer_bytes = 1 << 20;   // queued bytes per stream before it is ended
  int watch_queue = 1024;             // queued events per stream (0 = bytes only)
  double watch_stall_timeout_s = 10;  // time to take the end before cancellation
};

// TLS to https:// engines (engine.tls, engines/http/tls_client.h): PEM file
// paths (the loader checked them) and the server name; empty = unset.
struct EngineTlsSettings {
  std::string ca_file;      // empty: the system's default trust store
  std::string cert_file;    // client certificate (mTLS), with key_file
  std::string key_file;     // its private key, with cert_file
  std::string server_name;  // empty: each engine URL's host
  friend bool operator==(const EngineTlsSettings&, const EngineTlsSettings&) = default;
};

struct EngineIoSettings {
  double first_token_timeout_s = 2.5;       // B12; also each probe leg's budget
  double decode_read_timeout_s = 10;        // B13; 0 = request deadline bounds the stream
  double connect_timeout_s = 10;            // TCP connect
  double health_timeout_s = 5;              // health / identity requests
  std::string connector = "NixlConnector";  // a known connector
  std::string api_key_env;                  // env var holding the Bearer token for engines
  EngineTlsSettings tls;                    // restart-only
};

// The KV handoff contract (engines/descriptor_contract.h).
struct HandoffSettings {
  std::string remote_host = "pass";  // "pass", "rewrite" or "match"
  double lease_s = 30;               // the producers' KV lease; handoff_timeout_s is below it
  // Abandoned handoffs (router/handoff_releaser.h): "pull", "reject" or "off".
  std::string release = "pull";
  int release_max_inflight = 16;  // releases at once; beyond: dropped and counted
  double release_timeout_s = 5;   // one release leg
};

// Bounds on what one generation request may ask for, applied identically by
// both doors (server/openai_request): beyond them the request is refused
// with 400 / INVALID_ARGUMENT.
struct LimitSettings {
  int max_tokens = 131072;  // max_tokens and max_completion_tokens
  int max_messages = 4096;  // entries of a chat request's messages
  int max_prompts = 1024;   // prompts of one completions request (a prompt list)
};

// TLS on the router's listeners (HTTP, gRPC inference, gRPC admin): PEM
// file paths, both set or both empty (plaintext). The loader checked them;
// the listeners read them again at start-up.
struct TlsSettings {
  std::string cert_file;  // certificate chain, leaf first
  std::string key_file;   // the certificate's private key
  bool enabled() const { return !cert_file.empty(); }
};

// Where prefill legs go (router/fleet/placement.h, router/fleet/prefix_index.h).
struct PlacementSettings {
  std::string prefill = "cache_aware";  // "least_loaded", "cache_aware" or "kv_events"
  int index_chunks = 16384;             // prefix-index entries per producer (LRU)
  int imbalance_abs = 8;                // legs beyond the least-loaded producer ...
  double imbalance_rel = 1.5;           // ... and this many times its legs: least loaded wins
  // B28: "always" (every request disaggregated) or "auto" (a request whose
  // decode engine holds all but fewer than min_uncached_tokens of its prompt
  // runs there alone).
  std::string disaggregate = "always";
  int min_uncached_tokens = 512;
  bool cache_aware() const { return prefill == "cache_aware"; }
  bool kv_events() const { return prefill == "kv_events"; }
  bool auto_disaggregate() const { return disaggregate == "auto"; }
  // Whether a request's prompt is tokenized for placement (B27, B28).
  bool needs_tokens() const { return kv_events() || auto_disaggregate(); }
  friend bool operator==(const PlacementSettings&, const PlacementSettings&) = default;
};

enum class RestartPolicy { kIndividual, kWholeWave };

struct RecoverySettings {
  int eject_after = 3;              // consecutive same-class failures
  double failure_quarantine_s = 0;  // B15 timed hold; 0 = off
  double readmit_interval_s = 5;    // probe cadence for held/ejected engines
  double liveness_interval_s = 10;  // idle health sweeps; 0 = off
  int liveness_misses = 2;          // consecutive misses before ejection
  RestartPolicy engine_restart_policy = RestartPolicy::kIndividual;
};

// Per-link health (router/fleet/link_book.h).
struct LinkSettings {
  int hold_after = 3;    // consecutive failed decodes over one link before it may be held
  double window_s = 60;  // how recent the engines' successes with other peers must be
};

// How DNS groups are resolved (engines[].dns).
struct DiscoverySettings {
  std::vector<std::string> dns_servers;  // resolvers as "host:port"; empty = the system's
  double dns_refresh_s = 5;              // re-resolution cadence of every group
  double dns_timeout_s = 2;              // one lookup, <= dns_refresh_s
};

// Engines joining and leaving a running router (B20-B25).
struct MembershipSettings {
  bool join_checks = true;      // B22 checks before a joining engine is placed
  double drain_timeout_s = 30;  // B23: legs in flight on a leaving engine, then cancelled
  double remember_s = 600;      // B21: breaker state of an engine that left, kept this long
  double config_poll_s = 2;     // B20: content check of the config file; 0 = SIGHUP only
};

// The engines' KV-cache events (router/fleet/kv_subscriber.h).
struct KvEventsSettings {
  std::string topic;            // the SUB's prefix filter
  int block_size = 16;          // tokens per block
  double replay_timeout_s = 2;  // one replay of a gap, then cold
  int max_blocks_per_engine = 262144;
  // Where prompts are tokenized (B27): "engine" (POST /tokenize on an engine
  // in placement) or the base URL of a tokenize-only instance.
  std::string tokenizer = "engine";
  double tokenize_timeout_s = 0.5;
  friend bool operator==(const KvEventsSettings&, const KvEventsSettings&) = default;
};

// Stream continuation (B29, B30): a decode that fails after output has
// started continues on other engines from the tokens already sent.
struct ContinuationSettings {
  bool enabled = false;
  int max_per_request = 1;  // continuations one request may take
  double budget = 10;       // the router-wide credit pool: one credit per continuation
  double replenish = 0.1;   // credits back per completed request
  friend bool operator==(const ContinuationSettings&, const ContinuationSettings&) = default;
};

// Span export (SPEC §16; server/tracing/otlp_exporter).
struct TracingSettings {
  std::string otlp_endpoint;  // "http://host:port/path"; "" = no export
  int max_queued_spans = 8192;
  double export_interval_s = 1;
  double export_timeout_s = 5;
  bool enabled() const { return !otlp_endpoint.empty(); }
  friend bool operator==(const TracingSettings&, const TracingSettings&) = default;
};

struct Settings {
  std::string model;  // served model name (required)
  ListenSettings listen;
  std::vector<EngineSettings> engines;  // non-empty, unique iids, URLs and DNS groups
  std::optional<EngineContract> engine_contract;
  ServingSettings serving;
  AdminSettings admin;
  EngineIoSettings engine;
  RecoverySettings recovery;
  LimitSettings limits;
  TlsSettings tls;
  HandoffSettings handoff;
  PlacementSettings placement;
  LinkSettings links;
  DiscoverySettings discovery;
  MembershipSettings membership;
  KvEventsSettings kv_events;
  ContinuationSettings continuation;
  TracingSettings tracing;
};

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_COMMON_SETTINGS_H_
