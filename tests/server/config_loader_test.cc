// Tests for server/config/config_loader: one test per validation rule of the fleet
// file (SPEC §3), the defaults, the example files, the JSON form, what the
// schema check adds to protobuf's JSON parser, engine identity and
// credentials, and the bounds of every key that sizes a resource (the
// maximum values start a router that serves).
#include "server/config/config_loader.h"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <prometheus/registry.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <fstream>
#include <ostream>
#include <string>
#include <vector>

#include "engines/http/beast_engine_client.h"
#include "engines/http/io_loops.h"
#include "gtest/gtest.h"
#include "router/common/clock.h"
#include "router/fleet/fleet.h"
#include "router/router.h"
#include "server/config/engine_options.h"
#include "server/embedded_fleet.h"
#include "server/http/openai_shim.h"
#include "tests/server/raw_http_client.h"

namespace narwhal::server {
namespace {

using nlohmann::json;
using router::RestartPolicy;
using router::Role;
using router::Settings;

// The smallest valid fleet: one prefill and one decode engine.
json MinimalConfig() {
  return {{"model", "m"},
          {"engines",
           {{{"iid", "p0"}, {"url", "http://127.0.0.1:8100"}, {"role", "prefill"}},
            {{"iid", "d0"}, {"url", "http://127.0.0.1:8200"}, {"role", "decode"}}}}};
}

// MinimalConfig() with config[section][key] = value ("" section: top level).
json With(const std::string& section, const std::string& key, const json& value) {
  json config = MinimalConfig();
  if (section.empty()) {
    config[key] = value;
  } else {
    config[section][key] = value;
  }
  return config;
}

Settings MustLoad(const json& config) {
  absl::StatusOr<Settings> settings = ParseFleetConfig(config.dump());
  EXPECT_TRUE(settings.ok()) << settings.status();
  return settings.ok() ? *settings : Settings{};
}

// The error message of a config that must be rejected.
std::string ErrorText(const std::string& text) {
  absl::StatusOr<Settings> settings = ParseFleetConfig(text);
  EXPECT_FALSE(settings.ok()) << "accepted: " << text;
  if (settings.ok()) return "";
  EXPECT_EQ(settings.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(settings.status().message().substr(0, 8), "config: ") << settings.status();
  return std::string(settings.status().message());
}

std::string LoadErrorOf(const json& config) { return ErrorText(config.dump()); }

#define EXPECT_CONTAINS(haystack, needle)               \
  EXPECT_NE((haystack).find(needle), std::string::npos) \
      << "missing: " << (needle) << "\nin: " << (haystack)

void ExpectSettingsEq(const Settings& a, const Settings& b) {
  EXPECT_EQ(a.model, b.model);
  EXPECT_EQ(a.listen.http, b.listen.http);
  EXPECT_EQ(a.listen.grpc, b.listen.grpc);
  EXPECT_EQ(a.listen.admin, b.listen.admin);
  EXPECT_EQ(a.listen.health, b.listen.health);
  ASSERT_EQ(a.engines.size(), b.engines.size());
  for (size_t i = 0; i < a.engines.size(); ++i) {
    EXPECT_EQ(a.engines[i].iid, b.engines[i].iid);
    EXPECT_EQ(a.engines[i].url, b.engines[i].url);
    EXPECT_EQ(a.engines[i].role, b.engines[i].role);
    EXPECT_EQ(a.engines[i].kv_engine_id, b.engines[i].kv_engine_id);
    EXPECT_EQ(a.engines[i].dns, b.engines[i].dns);
    EXPECT_EQ(a.engines[i].port, b.engines[i].port);
  }
  ASSERT_EQ(a.engine_contract.has_value(), b.engine_contract.has_value());
  if (a.engine_contract) {
    EXPECT_EQ(a.engine_contract->vllm_version, b.engine_contract->vllm_version);
    EXPECT_EQ(a.engine_contract->model, b.engine_contract->model);
    EXPECT_EQ(a.engine_contract->max_model_len, b.engine_contract->max_model_len);
    EXPECT_EQ(a.engine_contract->connector, b.engine_contract->connector);
    EXPECT_EQ(a.engine_contract->system_fingerprint, b.engine_contract->system_fingerprint);
  }
  EXPECT_EQ(a.serving.max_attempts, b.serving.max_attempts);
  EXPECT_EQ(a.serving.request_timeout_s, b.serving.request_timeout_s);
  EXPECT_EQ(a.serving.prefill_timeout_s, b.serving.prefill_timeout_s);
  EXPECT_EQ(a.serving.handoff_timeout_s, b.serving.handoff_timeout_s);
  EXPECT_EQ(a.serving.retry_budget, b.serving.retry_budget);
  EXPECT_EQ(a.serving.retry_replenish, b.serving.retry_replenish);
  EXPECT_EQ(a.serving.retry_base_s, b.serving.retry_base_s);
  EXPECT_EQ(a.serving.retry_cap_s, b.serving.retry_cap_s);
  EXPECT_EQ(a.serving.max_inflight, b.serving.max_inflight);
  EXPECT_EQ(a.serving.max_request_bytes, b.serving.max_request_bytes);
  EXPECT_EQ(a.serving.graceful_timeout_s, b.serving.graceful_timeout_s);
  EXPECT_EQ(a.serving.api_key_env, b.serving.api_key_env);
  EXPECT_EQ(a.serving.io_threads, b.serving.io_threads);
  EXPECT_EQ(a.serving.loop_placement, b.serving.loop_placement);
  EXPECT_EQ(a.serving.max_connections, b.serving.max_connections);
  EXPECT_EQ(a.serving.max_header_bytes, b.serving.max_header_bytes);
  EXPECT_EQ(a.serving.max_headers, b.serving.max_headers);
  EXPECT_EQ(a.serving.header_timeout_s, b.serving.header_timeout_s);
  EXPECT_EQ(a.serving.keepalive_timeout_s, b.serving.keepalive_timeout_s);
  EXPECT_EQ(a.admin.token_env, b.admin.token_env);
  EXPECT_EQ(a.engine.first_token_timeout_s, b.engine.first_token_timeout_s);
  EXPECT_EQ(a.engine.decode_read_timeout_s, b.engine.decode_read_timeout_s);
  EXPECT_EQ(a.engine.connect_timeout_s, b.engine.connect_timeout_s);
  EXPECT_EQ(a.engine.health_timeout_s, b.engine.health_timeout_s);
  EXPECT_EQ(a.engine.connector, b.engine.connector);
  EXPECT_EQ(a.engine.api_key_env, b.engine.api_key_env);
  EXPECT_EQ(a.recovery.eject_after, b.recovery.eject_after);
  EXPECT_EQ(a.recovery.failure_quarantine_s, b.recovery.failure_quarantine_s);
  EXPECT_EQ(a.recovery.readmit_interval_s, b.recovery.readmit_interval_s);
  EXPECT_EQ(a.recovery.liveness_interval_s, b.recovery.liveness_interval_s);
  EXPECT_EQ(a.recovery.liveness_misses, b.recovery.liveness_misses);
  EXPECT_EQ(a.recovery.engine_restart_policy, b.recovery.engine_restart_policy);
  EXPECT_EQ(a.handoff.remote_host, b.handoff.remote_host);
  EXPECT_EQ(a.handoff.lease_s, b.handoff.lease_s);
  EXPECT_EQ(a.handoff.release, b.handoff.release);
  EXPECT_EQ(a.handoff.release_max_inflight, b.handoff.release_max_inflight);
  EXPECT_EQ(a.handoff.release_timeout_s, b.handoff.release_timeout_s);
  EXPECT_EQ(a.discovery.dns_servers, b.discovery.dns_servers);
  EXPECT_EQ(a.discovery.dns_refresh_s, b.discovery.dns_refresh_s);
  EXPECT_EQ(a.discovery.dns_timeout_s, b.discovery.dns_timeout_s);
  EXPECT_EQ(a.membership.join_checks, b.membership.join_checks);
  EXPECT_EQ(a.membership.drain_timeout_s, b.membership.drain_timeout_s);
  EXPECT_EQ(a.membership.remember_s, b.membership.remember_s);
  EXPECT_EQ(a.membership.config_poll_s, b.membership.config_poll_s);
  EXPECT_EQ(a.continuation, b.continuation);
}

// Removes annotation keys ("_...") at every level.
json WithoutAnnotations(const json& value) {
  if (value.is_array()) {
    json out = json::array();
    for (const json& item : value) out.push_back(WithoutAnnotations(item));
    return out;
  }
  if (!value.is_object()) return value;
  json out = json::object();
  for (const auto& item : value.items()) {
    if (!item.key().empty() && item.key()[0] == '_') continue;
    out[item.key()] = WithoutAnnotations(item.value());
  }
  return out;
}

std::string ExamplePath(const std::string& name) {
  return std::string(NARWHAL_SOURCE_DIR) + "/deploy/examples/" + name;
}

// ---------------------------------------------------------------------------
// Defaults, examples and the JSON form.

TEST(ConfigDefaults, MinimalConfigYieldsSpecDefaults) {
  const Settings s = MustLoad(MinimalConfig());
  EXPECT_EQ(s.model, "m");
  EXPECT_EQ(s.listen.http, "127.0.0.1:8000");
  EXPECT_EQ(s.listen.grpc, "127.0.0.1:50051");
  EXPECT_EQ(s.listen.admin, "127.0.0.1:50052");
  EXPECT_FALSE(s.engine_contract.has_value());
  EXPECT_EQ(s.serving.max_attempts, 1);
  EXPECT_EQ(s.serving.request_timeout_s, 600.0);
  EXPECT_EQ(s.serving.prefill_timeout_s, 120.0);
  EXPECT_EQ(s.serving.handoff_timeout_s, 24.0);  // 80% of handoff.lease_s
  EXPECT_EQ(s.handoff.lease_s, 30.0);
  EXPECT_EQ(s.handoff.remote_host, "pass");
  EXPECT_EQ(s.handoff.release, "pull");
  EXPECT_EQ(s.handoff.release_max_inflight, 16);
  EXPECT_EQ(s.handoff.release_timeout_s, 5.0);
  EXPECT_EQ(s.engines[0].kv_engine_id, "");
  EXPECT_EQ(s.serving.retry_budget, 10.0);
  EXPECT_EQ(s.serving.retry_replenish, 0.1);
  EXPECT_EQ(s.serving.retry_base_s, 0.1);
  EXPECT_EQ(s.serving.retry_cap_s, 1.0);
  EXPECT_EQ(s.serving.max_inflight, 768);
  EXPECT_EQ(s.serving.max_request_bytes, 4194304);
  EXPECT_EQ(s.serving.graceful_timeout_s, 30.0);
  EXPECT_EQ(s.serving.api_key_env, "");
  EXPECT_EQ(s.serving.io_threads, 0);
  EXPECT_EQ(s.serving.loop_placement, router::LoopPlacementPolicy::kPack);
  EXPECT_EQ(s.serving.max_connections, 4096);
  EXPECT_EQ(s.serving.max_header_bytes, 65536);
  EXPECT_EQ(s.serving.max_headers, 100);
  EXPECT_EQ(s.serving.header_timeout_s, 10.0);
  EXPECT_EQ(s.serving.keepalive_timeout_s, 60.0);
  EXPECT_EQ(s.admin.token_env, "");
  EXPECT_EQ(s.engine.first_token_timeout_s, 2.5);
  EXPECT_EQ(s.engine.decode_read_timeout_s, 10.0);
  EXPECT_EQ(s.engine.connect_timeout_s, 10.0);
  EXPECT_EQ(s.engine.health_timeout_s, 5.0);
  EXPECT_EQ(s.engine.connector, "NixlConnector");
  EXPECT_EQ(s.engine.api_key_env, "");
  EXPECT_EQ(s.recovery.eject_after, 3);
  EXPECT_EQ(s.recovery.failure_quarantine_s, 0.0);
  EXPECT_EQ(s.recovery.readmit_interval_s, 5.0);
  EXPECT_EQ(s.recovery.liveness_interval_s, 10.0);
  EXPECT_EQ(s.recovery.liveness_misses, 2);
  EXPECT_EQ(s.recovery.engine_restart_policy, RestartPolicy::kIndividual);
  EXPECT_FALSE(s.continuation.enabled);
  EXPECT_EQ(s.continuation.max_per_request, 1);
  EXPECT_EQ(s.continuation.budget, 10.0);
  EXPECT_EQ(s.continuation.replenish, 0.1);
}

TEST(ConfigDefaults, EngineContractDefaults) {
  const Settings s = MustLoad(With("", "engine_contract", {{"vllm_version", "0.29.1"}}));
  ASSERT_TRUE(s.engine_contract.has_value());
  EXPECT_EQ(s.engine_contract->vllm_version, "0.29.1");
  EXPECT_EQ(s.engine_contract->connector, "NixlConnector");
  EXPECT_FALSE(s.engine_contract->model.has_value());
  EXPECT_FALSE(s.engine_contract->max_model_len.has_value());
  EXPECT_FALSE(s.engine_contract->system_fingerprint.has_value());
}

TEST(ConfigExamples, MinimalExampleLoads) {
  absl::StatusOr<Settings> s = LoadFleetConfig(ExamplePath("fleet-minimal.json"));
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->engines.size(), 2u);
  EXPECT_EQ(s->engines[0].role, Role::kPrefill);
  EXPECT_EQ(s->engines[1].role, Role::kDecode);
}

TEST(ConfigExamples, FullExampleLoadsAndSetsEveryKey) {
  const std::string path = ExamplePath("fleet-full.json");
  absl::StatusOr<Settings> s = LoadFleetConfig(path);
  ASSERT_TRUE(s.ok()) << s.status();
  std::ifstream in(path);
  const json file = json::parse(in);
  // Every key the loader knows appears in the file, with the loaded value.
  EXPECT_EQ(WithoutAnnotations(file), SettingsToJson(*s));
  // The SPEC §3 example values.
  EXPECT_EQ(s->model, "Qwen/Qwen3-0.6B");
  EXPECT_EQ(s->engines[0].url, "http://10.0.0.11:8000");
  EXPECT_EQ(s->engines[1].url, "http://10.0.0.21:8000");
  ASSERT_TRUE(s->engine_contract.has_value());
  EXPECT_EQ(s->engine_contract->vllm_version, "0.29.1");
}

TEST(ConfigJson, DefaultsRoundTrip) {
  const Settings defaults = MustLoad(MinimalConfig());
  const json out = SettingsToJson(defaults);
  const Settings again = MustLoad(out);
  ExpectSettingsEq(defaults, again);
  EXPECT_EQ(SettingsToJson(again), out);
}

TEST(ConfigJson, EveryFieldRoundTrips) {
  Settings s = MustLoad(MinimalConfig());
  s.model = "org/model";
  s.listen = {"0.0.0.0:1", "[::1]:2", "localhost:3", "127.0.0.1:4"};
  s.engines = {{"a", "http://[::1]:9", Role::kBoth, "engine-a"},
               {"b", "http://h:10", Role::kDecode}};
  s.handoff = {"rewrite", 40};
  s.engine_contract = router::EngineContract{"v1", "org/model", 4096, "NixlConnector", "fp"};
  s.serving = {3, 100, 50, 25, 7, 0.5, 0.25, 2, 99, 2048, 1.5, "CLIENT_KEY"};
  s.serving.io_threads = 4;
  s.serving.loop_placement = router::LoopPlacementPolicy::kSpread;
  s.serving.max_connections = 12;
  s.serving.max_header_bytes = 2048;
  s.serving.max_headers = 7;
  s.serving.header_timeout_s = 0.75;
  s.serving.keepalive_timeout_s = 3.5;
  s.admin.token_env = "ADMIN_TOKEN";
  s.engine = {1.25, 0, 3, 4, "NixlConnector", "ENGINE_KEY", {}};
  s.recovery = {5, 2.5, 1, 3, 4, RestartPolicy::kWholeWave};
  router::EngineSettings group;
  group.iid = "g";
  group.dns = "decode.llm.svc.cluster.local.";
  group.port = 8000;
  group.role = Role::kDecode;
  group.kv_engine_id = "kv-g";
  s.engines.push_back(group);
  s.discovery = {{"10.96.0.10:53", "[fd00::a]:5353"}, 7.5, 1.5};
  s.membership = {false, 12, 0, 0};
  s.continuation = {true, 16, 2.5, 0.25};
  ExpectSettingsEq(s, MustLoad(SettingsToJson(s)));
}

TEST(ConfigJson, SettingsToJsonListsEveryKey) {
  const json out = SettingsToJson(MustLoad(MinimalConfig()));
  EXPECT_FALSE(out.contains("engine_contract"));
  EXPECT_EQ(out["serving"].size(), 19u);
  EXPECT_EQ(out["engine"].size(), 7u);
  EXPECT_EQ(out["engine"]["tls"], json::object());  // every key unset
  EXPECT_EQ(out["recovery"].size(), 6u);
  EXPECT_EQ(out["listen"].size(), 3u);
  EXPECT_EQ(out["admin"].size(), 5u);
  EXPECT_EQ(out["discovery"], json::parse(R"({"dns_servers": [], "dns_refresh_s": 5,
      "dns_timeout_s": 2})"));
  EXPECT_EQ(out["membership"], json::parse(R"({"join_checks": true, "drain_timeout_s": 30,
      "remember_s": 600, "config_poll_s": 2})"));
  EXPECT_EQ(out["continuation"], json::parse(R"({"enabled": false, "max_per_request": 1,
      "budget": 10, "replenish": 0.1})"));
  EXPECT_EQ(out["engines"][0]["role"], "prefill");
  EXPECT_EQ(out["recovery"]["engine_restart_policy"], "individual");
}

TEST(ConfigHandoff, AgeLimitIsBelowTheLease) {
  // Default: 80% of the lease, capped by the request deadline.
  EXPECT_EQ(MustLoad(With("handoff", "lease_s", 10)).serving.handoff_timeout_s, 8.0);
  json short_deadline = With("serving", "request_timeout_s", 5);
  short_deadline["serving"]["prefill_timeout_s"] = 5;
  EXPECT_EQ(MustLoad(short_deadline).serving.handoff_timeout_s, 5.0);
  // Explicit: below the lease, or refused.
  EXPECT_EQ(MustLoad(With("serving", "handoff_timeout_s", 29.5)).serving.handoff_timeout_s, 29.5);
  for (double age : {30.0, 45.0}) {
    const std::string error = LoadErrorOf(With("serving", "handoff_timeout_s", age));
    EXPECT_CONTAINS(error, "serving.handoff_timeout_s");
    EXPECT_CONTAINS(error, "must be < handoff.lease_s (30)");
  }
  json config = With("handoff", "lease_s", 60);
  config["serving"]["handoff_timeout_s"] = 45;
  EXPECT_EQ(MustLoad(config).serving.handoff_timeout_s, 45.0);
  EXPECT_CONTAINS(LoadErrorOf(With("handoff", "lease_s", 0)), "handoff.lease_s");
}

TEST(ConfigHandoff, ReleaseMechanismAndBounds) {
  for (const char* mode : {"pull", "reject", "off"}) {
    EXPECT_EQ(MustLoad(With("handoff", "release", mode)).handoff.release, mode);
  }
  EXPECT_CONTAINS(LoadErrorOf(With("handoff", "release", "abort")), "handoff.release");
  EXPECT_EQ(MustLoad(With("handoff", "release_max_inflight", 4)).handoff.release_max_inflight, 4);
  EXPECT_CONTAINS(LoadErrorOf(With("handoff", "release_max_inflight", 0)),
                  "handoff.release_max_inflight");
  EXPECT_EQ(MustLoad(With("handoff", "release_timeout_s", 0.5)).handoff.release_timeout_s, 0.5);
  EXPECT_CONTAINS(LoadErrorOf(With("handoff", "release_timeout_s", 0)),
                  "handoff.release_timeout_s");
  EXPECT_CONTAINS(LoadErrorOf(With("handoff", "release_timeout_s", 61)),
                  "handoff.release_timeout_s");
}

TEST(ConfigHandoff, RemoteHostPolicyAndEngineIds) {
  for (const char* policy : {"pass", "rewrite", "match"}) {
    EXPECT_EQ(MustLoad(With("handoff", "remote_host", policy)).handoff.remote_host, policy);
  }
  EXPECT_CONTAINS(LoadErrorOf(With("handoff", "remote_host", "Rewrite")), "handoff.remote_host");
  json config = MinimalConfig();
  config["engines"][0]["kv_engine_id"] = "4d2c0a8e_dp0";
  EXPECT_EQ(MustLoad(config).engines[0].kv_engine_id, "4d2c0a8e_dp0");
  config["engines"][0]["kv_engine_id"] = "";
  EXPECT_CONTAINS(LoadErrorOf(config), "engines[0].kv_engine_id");
  config["engines"][0]["kv_engine_id"] = 7;
  EXPECT_CONTAINS(LoadErrorOf(config), "engines[0].kv_engine_id");
}

// ---------------------------------------------------------------------------
// Syntax.

TEST(ConfigSyntax, InvalidJsonReportsLineAndColumn) {
  const std::string message = ErrorText("{\n  \"model\": \"m\",\n    oops\n}");
  EXPECT_CONTAINS(message, "config: invalid JSON at line 3, column 5: ");
  EXPECT_CONTAINS(message, "invalid literal");
  EXPECT_EQ(message.find("json.exception"), std::string::npos) << message;
}

TEST(ConfigSyntax, TruncatedJsonReportsPosition) {
  EXPECT_CONTAINS(ErrorText("{\"model\": \"m\""), "invalid JSON at line 1, column ");
  EXPECT_CONTAINS(ErrorText(""), "invalid JSON at line 1, column ");
}

bool IsPrintableAscii(const std::string& s) {
  for (const char c : s) {
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) return false;
  }
  return true;
}

TEST(ConfigSyntax, HostileInputGivesShortPrintableErrors) {
  const std::string bad_utf8 = ErrorText("{\"model\": \"\xff\xfe\"}");
  EXPECT_CONTAINS(bad_utf8, "invalid JSON at line 1, column 12: ");
  EXPECT_CONTAINS(bad_utf8, "\\xFF");
  EXPECT_TRUE(IsPrintableAscii(bad_utf8)) << bad_utf8;

  const std::string unterminated = ErrorText("{\"model\": \"" + std::string(100000, 'a'));
  EXPECT_LT(unterminated.size(), 400u);
  EXPECT_TRUE(IsPrintableAscii(unterminated));

  // A deep document is refused before it is parsed (copying it would
  // overflow the stack); the syntax is not even looked at.
  EXPECT_CONTAINS(ErrorText(std::string(100000, '[')),
                  "invalid JSON: the document nests deeper than 128 levels");
  EXPECT_CONTAINS(ErrorText(std::string(100000, '[') + std::string(100000, ']')),
                  "invalid JSON: the document nests deeper than 128 levels");
  EXPECT_CONTAINS(ErrorText(std::string(128, '[') + std::string(128, ']')),
                  "the top level must be a JSON object");
  EXPECT_CONTAINS(ErrorText(std::string("{\"model\"\0: 1}", 13)),
                  "invalid JSON at line 1, column 9");
  // Values are shown JSON-escaped.
  json config = MinimalConfig();
  config["engines"][1]["iid"] = "a\nb\x01";
  EXPECT_CONTAINS(LoadErrorOf(config),
                  "engines[1].iid must contain only [A-Za-z0-9._-] (got \"a\\nb\\u0001\")");
}

TEST(ConfigSyntax, TopLevelMustBeAnObject) {
  EXPECT_CONTAINS(ErrorText("[1, 2]"), "the top level must be a JSON object (got array)");
  EXPECT_CONTAINS(ErrorText("\"text\""), "the top level must be a JSON object (got string)");
}

TEST(ConfigSyntax, DuplicateKeysRejected) {
  EXPECT_CONTAINS(ErrorText(R"({"model": "a", "model": "b", "engines": []})"),
                  "config: model: duplicate key");
  EXPECT_CONTAINS(ErrorText(R"({"model": "m", "serving": {"max_attempts": 1, "max_attempts": 2},
                  "engines": [{"iid": "p0", "url": "http://h:1", "iid": "p1"}]})"),
                  "serving.max_attempts: duplicate key");
  EXPECT_CONTAINS(ErrorText(R"({"model": "m", "engines": [{"iid": "a", "url": "http://h:1"},
                            {"iid": "p0", "url": "http://h:1", "iid": "p1"}]})"),
                  "engines[1].iid: duplicate key");
}

TEST(ConfigSyntax, AllErrorsAreReportedJoined) {
  json config = MinimalConfig();
  config["serving"]["max_attempts"] = 9;
  config["recovery"]["eject_after"] = 0;
  const std::string message = LoadErrorOf(config);
  EXPECT_CONTAINS(message,
                  "serving.max_attempts must be between 1 and 3 (got 9); "
                  "recovery.eject_after must be >= 1 (got 0)");
}

TEST(ConfigSyntax, ManyErrorsAreCapped) {
  json config = MinimalConfig();
  for (int i = 0; i < 30; ++i) config["serving"]["unknown" + std::to_string(100 + i)] = 1;
  const std::string message = LoadErrorOf(config);
  EXPECT_CONTAINS(message, "(10 more errors)");
}

// ---------------------------------------------------------------------------
// Unknown keys and annotations.

TEST(ConfigUnknownKeys, RejectedInEverySection) {
  EXPECT_CONTAINS(LoadErrorOf(With("", "modle", "m")), "config: modle: unknown key");
  EXPECT_CONTAINS(LoadErrorOf(With("serving", "max_attempt", 2)),
                  "serving.max_attempt: unknown key");
  EXPECT_CONTAINS(LoadErrorOf(With("listen", "https", "a:1")), "listen.https: unknown key");
  EXPECT_CONTAINS(LoadErrorOf(With("admin", "token", "x")), "admin.token: unknown key");
  EXPECT_CONTAINS(LoadErrorOf(With("engine", "api_key", "x")), "engine.api_key: unknown key");
  EXPECT_CONTAINS(LoadErrorOf(With("recovery", "readmit_every", 1)),
                  "recovery.readmit_every: unknown key");
  EXPECT_CONTAINS(LoadErrorOf(With("", "engine_contract", {{"vllm_version", "v"}, {"image", "x"}})),
                  "engine_contract.image: unknown key");
  EXPECT_CONTAINS(LoadErrorOf(With("continuation", "max_per_requests", 2)),
                  "continuation.max_per_requests: unknown key");
  json config = MinimalConfig();
  config["engines"][1]["pin"] = false;
  EXPECT_CONTAINS(LoadErrorOf(config), "engines[1].pin: unknown key");
}

TEST(ConfigUnknownKeys, AnnotationsIgnoredAtEveryLevel) {
  json config = MinimalConfig();
  config["_comment"] = "top";
  config["engines"][0]["_note"] = {{"anything", true}};
  for (const char* section : {"listen", "serving", "admin", "engine", "recovery", "continuation"}) {
    config[section]["_why"] = 1;
  }
  config["engine_contract"] = {{"vllm_version", "v"}, {"_source", "ops"}};
  MustLoad(config);
}

// ---------------------------------------------------------------------------
// Types.

TEST(ConfigTypes, StringsMustBeStrings) {
  EXPECT_CONTAINS(LoadErrorOf(With("", "model", 7)),
                  "config: model must be a string (got integer)");
  EXPECT_CONTAINS(LoadErrorOf(With("listen", "http", 8000)), "listen.http must be a string");
  EXPECT_CONTAINS(LoadErrorOf(With("engine", "connector", nullptr)),
                  "engine.connector must be a string (got null)");
  EXPECT_CONTAINS(LoadErrorOf(With("serving", "api_key_env", false)),
                  "serving.api_key_env must be a string (got boolean)");
  json config = MinimalConfig();
  config["engines"][0]["role"] = 1;
  EXPECT_CONTAINS(LoadErrorOf(config), "engines[0].role must be a string");
}

TEST(ConfigTypes, IntegersMustBeIntegers) {
  EXPECT_CONTAINS(LoadErrorOf(With("serving", "max_attempts", 2.5)),
                  "serving.max_attempts must be an integer (got number 2.5)");
  EXPECT_CONTAINS(LoadErrorOf(With("serving", "max_attempts", 3.0)),
                  "serving.max_attempts must be an integer (got number 3.0)");
  EXPECT_CONTAINS(LoadErrorOf(With("serving", "max_attempts", "2")),
                  "serving.max_attempts must be an integer (got string \"2\")");
  EXPECT_CONTAINS(LoadErrorOf(With("recovery", "liveness_misses", true)),
                  "recovery.liveness_misses must be an integer (got boolean true)");
  EXPECT_CONTAINS(LoadErrorOf(With("serving", "max_request_bytes", 1e6)),
                  "serving.max_request_bytes must be an integer");
}

TEST(ConfigTypes, HugeIntegersAreOutOfRange) {
  EXPECT_CONTAINS(ErrorText(R"({"model": "m", "engines": [{"iid": "a", "url": "http://h:1"}],
                            "recovery": {"eject_after": 18446744073709551615}})"),
                  "recovery.eject_after must be <= 2147483647");
  EXPECT_CONTAINS(ErrorText(R"({"model": "m", "engines": [{"iid": "a", "url": "http://h:1"}],
                            "serving": {"max_inflight": 99999999999999999999}})"),
                  "serving.max_inflight must be an integer");
  EXPECT_CONTAINS(
      LoadErrorOf(With("", "engine_contract",
                       {{"vllm_version", "v"}, {"max_model_len", 18446744073709551615u}})),
      "engine_contract.max_model_len must be <= 2147483647 (got 18446744073709551615)");
}

TEST(ConfigTypes, DurationsMustBeNumbers) {
  EXPECT_CONTAINS(LoadErrorOf(With("serving", "request_timeout_s", "600")),
                  "serving.request_timeout_s must be a number of seconds (got string)");
  EXPECT_CONTAINS(LoadErrorOf(With("engine", "first_token_timeout_s", true)),
                  "engine.first_token_timeout_s must be a number of seconds (got boolean)");
  EXPECT_CONTAINS(LoadErrorOf(With("serving", "retry_replenish", "0.1")),
                  "serving.retry_replenish must be a number (got string)");
  // Integers are fine for durations.
  EXPECT_EQ(MustLoad(With("engine", "connect_timeout_s", 3)).engine.connect_timeout_s, 3.0);
}

TEST(ConfigTypes, DurationsMustBeFiniteAndBounded) {
  EXPECT_CONTAINS(LoadErrorOf(With("recovery", "readmit_interval_s", 1e308)),
                  "recovery.readmit_interval_s must be <= 10000000 (got 1e+308)");
  // nlohmann refuses numbers beyond a double while parsing.
  EXPECT_CONTAINS(ErrorText(R"({"model": "m", "engines": [{"iid": "a", "url": "http://h:1"}],
                            "serving": {"graceful_timeout_s": 1e999}})"),
                  "config: invalid JSON: number overflow parsing '1e999'");
  EXPECT_EQ(MustLoad(With("recovery", "failure_quarantine_s", 1e7)).recovery.failure_quarantine_s,
            1e7);
}

TEST(ConfigTypes, SectionsMustBeObjects) {
  EXPECT_CONTAINS(LoadErrorOf(With("", "serving", json::array())),
                  "serving must be an object (got array)");
  EXPECT_CONTAINS(LoadErrorOf(With("", "engine_contract", nullptr)),
                  "engine_contract must be an object (got null)");
  EXPECT_CONTAINS(LoadErrorOf(With("", "listen", "127.0.0.1:1")), "listen must be an object");
}

// ---------------------------------------------------------------------------
// Required keys.

TEST(ConfigRequired, ModelRequired) {
  json config = MinimalConfig();
  config.erase("model");
  EXPECT_CONTAINS(LoadErrorOf(config), "config: model is required");
  EXPECT_CONTAINS(LoadErrorOf(With("", "model", "")), "model must not be empty");
}

TEST(ConfigRequired, EnginesRequiredNonEmptyArray) {
  json config = MinimalConfig();
  config.erase("engines");
  EXPECT_CONTAINS(LoadErrorOf(config), "engines is required");
  EXPECT_CONTAINS(LoadErrorOf(With("", "engines", json::array())), "engines must not be empty");
  EXPECT_CONTAINS(LoadErrorOf(With("", "engines", json::object())),
                  "engines must be an array (got object)");
  EXPECT_CONTAINS(LoadErrorOf(With("", "engines", {"http://h:1"})),
                  "engines[0] must be an object (got string)");
}

TEST(ConfigRequired, EngineIidRequiredNonEmpty) {
  json config = MinimalConfig();
  config["engines"][1].erase("iid");
  EXPECT_CONTAINS(LoadErrorOf(config), "engines[1].iid is required");
  config["engines"][1]["iid"] = "";
  EXPECT_CONTAINS(LoadErrorOf(config), "engines[1].iid must not be empty");
  config["engines"][1]["iid"] = "d 0";
  EXPECT_CONTAINS(LoadErrorOf(config),
                  "engines[1].iid must contain only [A-Za-z0-9._-] (got \"d 0\")");
}

TEST(ConfigRequired, EngineIidUnique) {
  json config = MinimalConfig();
  config["engines"].push_back({{"iid", "p0"}, {"url", "http://h:3"}});
  EXPECT_CONTAINS(LoadErrorOf(config), "engines[2].iid \"p0\" is a duplicate of engines[0].iid");
}

TEST(ConfigRequired, EngineUrlRequired) {
  json config = MinimalConfig();
  config["engines"][0].erase("url");
  EXPECT_CONTAINS(LoadErrorOf(config), "engines[0].url is required");
}

TEST(ConfigRequired, ContractVllmVersionRequired) {
  EXPECT_CONTAINS(LoadErrorOf(With("", "engine_contract", {{"connector", "NixlConnector"}})),
                  "engine_contract.vllm_version is required");
  EXPECT_CONTAINS(LoadErrorOf(With("", "engine_contract", {{"vllm_version", ""}})),
                  "engine_contract.vllm_version must not be empty");
}

TEST(ConfigRequired, ContractOptionalFieldsNonEmpty) {
  EXPECT_CONTAINS(LoadErrorOf(With("", "engine_contract", {{"vllm_version", "v"}, {"model", ""}})),
                  "engine_contract.model must not be empty");
  EXPECT_CONTAINS(
      LoadErrorOf(With("", "engine_contract", {{"vllm_version", "v"}, {"system_fingerprint", ""}})),
      "engine_contract.system_fingerprint must not be empty");
  EXPECT_CONTAINS(
      LoadErrorOf(With("", "engine_contract", {{"vllm_version", "v"}, {"connector", ""}})),
      "engine_contract.connector must not be empty");
}

// ---------------------------------------------------------------------------
// Engine URLs.

std::string UrlError(const std::string& url) {
  json config = MinimalConfig();
  config["engines"][0]["url"] = url;
  return LoadErrorOf(config);
}

std::string ParsedUrl(const std::string& url) {
  json config = MinimalConfig();
  config["engines"][0]["url"] = url;
  return MustLoad(config).engines[0].url;
}

TEST(ConfigKvEvents, B26_EndpointsAreTcpHostPortTheRouterConnectsTo) {
  json config = MinimalConfig();
  config["engines"][0]["kv_events"] = "tcp://10.0.0.11:5557";
  config["engines"][0]["kv_events_replay"] = "tcp://10.0.0.11:5558";
  config["kv_events"] = {{"topic", "kv@"}, {"block_size", 32}};
  const Settings s = MustLoad(config);
  EXPECT_EQ(s.engines[0].kv_events, "tcp://10.0.0.11:5557");
  EXPECT_EQ(s.engines[0].kv_events_replay, "tcp://10.0.0.11:5558");
  EXPECT_EQ(s.engines[1].kv_events, "");
  EXPECT_EQ(s.kv_events.topic, "kv@");
  EXPECT_EQ(s.kv_events.block_size, 32);
  EXPECT_EQ(s.kv_events.replay_timeout_s, 2);

  // vLLM binds "tcp://*:5557"; the router must be given the engine's address.
  config["engines"][0]["kv_events"] = "tcp://*:5557";
  EXPECT_CONTAINS(LoadErrorOf(config),
                  "engines[0].kv_events must be tcp://host:port: a bind wildcard");
  config["engines"][0]["kv_events"] = "ipc:///tmp/kv";
  EXPECT_CONTAINS(LoadErrorOf(config), "engines[0].kv_events must be tcp://host:port");
  config["engines"][0]["kv_events"] = "tcp://10.0.0.11:0";
  EXPECT_CONTAINS(LoadErrorOf(config), "engines[0].kv_events");
  // A replay endpoint alone has no stream to repair.
  config["engines"][0].erase("kv_events");
  EXPECT_CONTAINS(LoadErrorOf(config),
                  "engines[0].kv_events_replay is only valid with engines[0].kv_events");
  EXPECT_CONTAINS(LoadErrorOf(With("kv_events", "block_size", 0)), "kv_events.block_size");
  EXPECT_CONTAINS(LoadErrorOf(With("kv_events", "replay_timeout_s", 0)),
                  "kv_events.replay_timeout_s");
}

TEST(ConfigKvEvents, B27_TheTokenizerIsAnEngineOrAnHttpBaseUrl) {
  json config = MinimalConfig();
  config["placement"] = {
      {"prefill", "kv_events"}, {"disaggregate", "auto"}, {"min_uncached_tokens", 256}};
  Settings s = MustLoad(config);
  EXPECT_TRUE(s.placement.kv_events());
  EXPECT_TRUE(s.placement.auto_disaggregate());
  EXPECT_EQ(s.placement.min_uncached_tokens, 256);
  EXPECT_EQ(s.kv_events.tokenizer, "engine");
  EXPECT_EQ(s.kv_events.tokenize_timeout_s, 0.5);
  config["kv_events"] = {{"tokenizer", "http://tokenizer.internal:8000/"},
                         {"tokenize_timeout_s", 0.25}};
  s = MustLoad(config);
  EXPECT_EQ(s.kv_events.tokenizer, "http://tokenizer.internal:8000");  // without the "/"
  EXPECT_EQ(s.kv_events.tokenize_timeout_s, 0.25);
  config["kv_events"] = {{"tokenizer", "tokenizer.internal:8000"}};
  EXPECT_CONTAINS(LoadErrorOf(config),
                  "kv_events.tokenizer must be \"engine\" or http(s)://host:port: must start with "
                  "http:// or https://");
  config["kv_events"] = {{"tokenizer", "http://t:8000/tokenize"}};
  EXPECT_CONTAINS(LoadErrorOf(config), "a path is not allowed");
  config["kv_events"] = {{"tokenize_timeout_s", 0}};
  EXPECT_CONTAINS(LoadErrorOf(config), "kv_events.tokenize_timeout_s");
  config.erase("kv_events");
  config["placement"]["disaggregate"] = "sometimes";
  EXPECT_CONTAINS(LoadErrorOf(config),
                  "placement.disaggregate must be one of \"always\", \"auto\"");
}

TEST(ConfigContinuation, B29_OffByDefaultAndEveryKeyRead) {
  json config = MinimalConfig();
  Settings s = MustLoad(config);
  EXPECT_FALSE(s.continuation.enabled);
  EXPECT_EQ(s.continuation, router::ContinuationSettings{});
  // A section with some keys: the others keep their defaults.
  config["continuation"] = {{"enabled", true}};
  s = MustLoad(config);
  EXPECT_TRUE(s.continuation.enabled);
  EXPECT_EQ(s.continuation.max_per_request, 1);
  EXPECT_EQ(s.continuation.budget, 10.0);
  EXPECT_EQ(s.continuation.replenish, 0.1);
  config["continuation"] = {
      {"enabled", true}, {"max_per_request", 4}, {"budget", 2.5}, {"replenish", 0.25}};
  s = MustLoad(config);
  EXPECT_TRUE(s.continuation.enabled);
  EXPECT_EQ(s.continuation.max_per_request, 4);
  EXPECT_EQ(s.continuation.budget, 2.5);
  EXPECT_EQ(s.continuation.replenish, 0.25);
  // The bounds of each key, inclusive.
  config["continuation"] = {{"max_per_request", 0}, {"budget", 0}, {"replenish", 0}};
  s = MustLoad(config);
  EXPECT_EQ(s.continuation.max_per_request, 0);
  EXPECT_EQ(s.continuation.budget, 0.0);
  EXPECT_EQ(s.continuation.replenish, 0.0);
  config["continuation"] = {{"max_per_request", 16}, {"budget", 1e9}, {"replenish", 1}};
  s = MustLoad(config);
  EXPECT_EQ(s.continuation.max_per_request, 16);
  EXPECT_EQ(s.continuation.budget, 1e9);
  EXPECT_EQ(s.continuation.replenish, 1.0);
  // Types.
  EXPECT_CONTAINS(LoadErrorOf(With("continuation", "enabled", "true")),
                  "continuation.enabled must be true or false (got string \"true\")");
  EXPECT_CONTAINS(LoadErrorOf(With("continuation", "enabled", 1)),
                  "continuation.enabled must be true or false (got integer 1)");
  EXPECT_CONTAINS(LoadErrorOf(With("continuation", "max_per_request", 1.5)),
                  "continuation.max_per_request must be an integer (got number 1.5)");
  EXPECT_CONTAINS(LoadErrorOf(With("continuation", "budget", "10")),
                  "continuation.budget must be a number (got string)");
  EXPECT_CONTAINS(LoadErrorOf(With("continuation", "replenish", nullptr)),
                  "continuation.replenish must be a number (got null)");
  EXPECT_CONTAINS(LoadErrorOf(With("", "continuation", true)),
                  "continuation must be an object (got boolean)");
  // Every violation is listed.
  config["continuation"] = {{"max_per_request", 17}, {"budget", -1}, {"replenish", 2}};
  const std::string error = LoadErrorOf(config);
  EXPECT_CONTAINS(error, "continuation.max_per_request must be between 0 and 16 (got 17)");
  EXPECT_CONTAINS(error, "continuation.budget must be >= 0 (got -1)");
  EXPECT_CONTAINS(error, "continuation.replenish must be <= 1 (got 2)");
}

TEST(ConfigEngineUrl, HttpsIsAccepted) {
  EXPECT_EQ(ParsedUrl("https://10.0.0.1:8000/"), "https://10.0.0.1:8000");
  EXPECT_CONTAINS(UrlError("https://10.0.0.1"),
                  "engines[0].url must be http(s)://host:port: missing :PORT");
}

TEST(ConfigEngineTls, FilesAreCheckedAtLoadNamingTheKey) {
  json config = MinimalConfig();
  config["engine"] = {{"tls", {{"ca_file", "/nonexistent/engines-ca.pem"}}}};
  EXPECT_CONTAINS(
      LoadErrorOf(config),
      "engine.tls.ca_file \"/nonexistent/engines-ca.pem\": cannot load a PEM CA bundle");
  config["engine"] = {{"tls", {{"key_file", "/k.pem"}}}};
  EXPECT_CONTAINS(LoadErrorOf(config),
                  "engine.tls.cert_file is required with engine.tls.key_file (both or neither)");
  config["engine"] = {{"tls", {{"server_name", "vllm.internal"}}}};
  const Settings s = MustLoad(config);
  EXPECT_EQ(s.engine.tls.server_name, "vllm.internal");
  EXPECT_EQ(s.engine.tls.ca_file, "");
}

TEST(ConfigEngineUrl, MustBeHttpHostPort) {
  EXPECT_CONTAINS(UrlError("10.0.0.1:8000"),
                  "engines[0].url must be http(s)://host:port: must start "
                  "with http:// or https:// (got \"10.0.0.1:8000\")");
  EXPECT_CONTAINS(UrlError("http://10.0.0.1"),
                  "engines[0].url must be http(s)://host:port: missing "
                  ":PORT");
  EXPECT_CONTAINS(UrlError("http://:8000"), "missing host");
  EXPECT_CONTAINS(UrlError("http://h:port"), "PORT must be a number");
  EXPECT_CONTAINS(UrlError("http://user@h:1"), "credentials are not allowed");
  EXPECT_CONTAINS(UrlError("http://h:1/?x=1"), "a query or fragment is not allowed");
  EXPECT_CONTAINS(UrlError("http://h ost:1"), "invalid host");
  EXPECT_CONTAINS(UrlError("http://::1:80"), "IPv6 hosts must be in [brackets]");
}

TEST(ConfigEngineUrl, PortMustBe1To65535) {
  EXPECT_CONTAINS(UrlError("http://h:0"),
                  "engines[0].url must be http(s)://host:port: PORT must "
                  "be 1..65535");
  EXPECT_CONTAINS(UrlError("http://h:65536"), "PORT must be 1..65535");
  EXPECT_EQ(ParsedUrl("http://h:65535"), "http://h:65535");
}

TEST(ConfigEngineUrl, NoPathExceptSlash) {
  EXPECT_CONTAINS(UrlError("http://h:1/v1"),
                  "engines[0].url must be http(s)://host:port: a path is "
                  "not allowed");
  EXPECT_CONTAINS(UrlError("http://h:1//"), "a path is not allowed");
  EXPECT_EQ(ParsedUrl("http://10.0.0.1:8000/"), "http://10.0.0.1:8000");
}

TEST(ConfigEngineUrl, HostnameAndIpv6Accepted) {
  EXPECT_EQ(ParsedUrl("http://engine-0.internal:8000"), "http://engine-0.internal:8000");
  EXPECT_EQ(ParsedUrl("http://[::1]:8000"), "http://[::1]:8000");
  EXPECT_EQ(ParsedUrl("http://[fe80::1]:8000/"), "http://[fe80::1]:8000");
}

// ---------------------------------------------------------------------------
// Roles.

TEST(ConfigRoles, RoleMustBeKnown) {
  json config = MinimalConfig();
  config["engines"][0]["role"] = "producer";
  EXPECT_CONTAINS(LoadErrorOf(config),
                  "engines[0].role must be one of \"prefill\", \"decode\", \"both\" (got "
                  "\"producer\")");
}

TEST(ConfigRoles, RoleDefaultsToBoth) {
  const Settings s = MustLoad(With("", "engines", {{{"iid", "x"}, {"url", "http://h:1"}}}));
  ASSERT_EQ(s.engines.size(), 1u);
  EXPECT_EQ(s.engines[0].role, Role::kBoth);
}

TEST(ConfigRoles, FleetNeedsADecodeEngine) {
  json config = MinimalConfig();
  config["engines"][1]["role"] = "prefill";
  const std::string message = LoadErrorOf(config);
  EXPECT_CONTAINS(message, "engines: no engine can serve the decode role");
  EXPECT_EQ(message.find("prefill role"), std::string::npos) << message;
}

TEST(ConfigRoles, FleetNeedsAPrefillEngine) {
  json config = MinimalConfig();
  config["engines"][0]["role"] = "decode";
  EXPECT_CONTAINS(LoadErrorOf(config), "engines: no engine can serve the prefill role");
}

TEST(ConfigRoles, OneBothEngineServesBothLegs) {
  json config = MinimalConfig();
  config["engines"][0]["role"] = "both";
  config["engines"][1]["role"] = "both";
  MustLoad(config);
}

// ---------------------------------------------------------------------------
// Listeners.

TEST(ConfigListen, AcceptsHostPortForms) {
  json config = MinimalConfig();
  config["listen"] = {{"http", "0.0.0.0:0"}, {"grpc", "localhost:65535"}, {"admin", "[::1]:80"}};
  const Settings s = MustLoad(config);
  EXPECT_EQ(s.listen.http, "0.0.0.0:0");
  EXPECT_EQ(s.listen.grpc, "localhost:65535");
  EXPECT_EQ(s.listen.admin, "[::1]:80");
}

TEST(ConfigListen, MustBeHostPort) {
  EXPECT_CONTAINS(LoadErrorOf(With("listen", "http", "8000")),
                  "listen.http must be HOST:PORT: missing :PORT (got \"8000\")");
  EXPECT_CONTAINS(LoadErrorOf(With("listen", "grpc", "h:65536")),
                  "listen.grpc must be HOST:PORT: PORT must be 0..65535");
  EXPECT_CONTAINS(LoadErrorOf(With("listen", "admin", ":50052")),
                  "listen.admin must be HOST:PORT: missing host");
  EXPECT_CONTAINS(LoadErrorOf(With("listen", "admin", "[::1:80")),
                  "listen.admin must be HOST:PORT: unterminated [IPv6] host");
  EXPECT_CONTAINS(LoadErrorOf(With("listen", "admin", "[zz]:80")),
                  "listen.admin must be HOST:PORT: invalid IPv6 address");
  EXPECT_CONTAINS(LoadErrorOf(With("listen", "http", "http://h:1")),
                  "listen.http must be HOST:PORT");
}

// ---------------------------------------------------------------------------
// Ranges: one case per rule, named after it.

struct RangeCase {
  std::string name;
  std::string section;
  std::string key;
  json value;
  std::string message;  // expected, after "<section>.<key> "
};

// Keeps test names readable in ctest ("serving.max_attempts=0").
void PrintTo(const RangeCase& c, std::ostream* os) {
  *os << c.section << "." << c.key << "=" << c.value.dump();
}

class ConfigRange : public ::testing::TestWithParam<RangeCase> {};

TEST_P(ConfigRange, Rejected) {
  const RangeCase& c = GetParam();
  json config = MinimalConfig();
  if (c.section == "engine_contract") config["engine_contract"]["vllm_version"] = "v";
  config[c.section][c.key] = c.value;
  EXPECT_CONTAINS(LoadErrorOf(config), c.section + "." + c.key + " " + c.message);
}

INSTANTIATE_TEST_SUITE_P(
    Rules, ConfigRange,
    ::testing::Values(
        RangeCase{"MaxAttemptsAtLeast1", "serving", "max_attempts", 0,
                  "must be between 1 and 3 (got 0)"},
        RangeCase{"MaxAttemptsAtMost3", "serving", "max_attempts", 4,
                  "must be between 1 and 3 (got 4)"},
        RangeCase{"RequestTimeoutPositive", "serving", "request_timeout_s", 0, "must be > 0"},
        RangeCase{"PrefillTimeoutPositive", "serving", "prefill_timeout_s", -1, "must be > 0"},
        RangeCase{"HandoffTimeoutNonNegative", "serving", "handoff_timeout_s", -0.5,
                  "must be >= 0 (got -0.5)"},
        RangeCase{"RetryBudgetNonNegative", "serving", "retry_budget", -1, "must be >= 0"},
        RangeCase{"RetryBudgetBounded", "serving", "retry_budget", 1e10, "must be <= 1000000000"},
        RangeCase{"RetryReplenishNonNegative", "serving", "retry_replenish", -0.1, "must be >= 0"},
        RangeCase{"RetryReplenishAtMost1", "serving", "retry_replenish", 1.5, "must be <= 1"},
        RangeCase{"RetryBaseNonNegative", "serving", "retry_base_s", -0.1, "must be >= 0"},
        RangeCase{"RetryCapNonNegative", "serving", "retry_cap_s", -1, "must be >= 0"},
        RangeCase{"MaxInflightAtLeast1", "serving", "max_inflight", 0,
                  "must be between 1 and 100000"},
        RangeCase{"MaxInflightAtMost100000", "serving", "max_inflight", 100001,
                  "must be between 1 and 100000"},
        RangeCase{"MaxRequestBytesAtLeast1024", "serving", "max_request_bytes", 1023,
                  "must be between 1024 and 1073741824"},
        RangeCase{"MaxRequestBytesAtMost1GiB", "serving", "max_request_bytes", 1073741825,
                  "must be between 1024 and 1073741824"},
        RangeCase{"GracefulTimeoutNonNegative", "serving", "graceful_timeout_s", -1,
                  "must be >= 0"},
        RangeCase{"IoThreadsNonNegative", "serving", "io_threads", -1,
                  "must be between 0 and 64 (got -1)"},
        RangeCase{"IoThreadsAtMost64", "serving", "io_threads", 65,
                  "must be between 0 and 64 (got 65)"},
        RangeCase{"MaxConnectionsAtLeast1", "serving", "max_connections", 0,
                  "must be between 1 and 1000000 (got 0)"},
        RangeCase{"MaxConnectionsAtMost1000000", "serving", "max_connections", 1000001,
                  "must be between 1 and 1000000"},
        RangeCase{"MaxHeaderBytesAtLeast1024", "serving", "max_header_bytes", 1023,
                  "must be between 1024 and 1048576 (got 1023)"},
        RangeCase{"MaxHeaderBytesAtMost1MiB", "serving", "max_header_bytes", 1048577,
                  "must be between 1024 and 1048576"},
        RangeCase{"MaxHeadersAtLeast1", "serving", "max_headers", 0,
                  "must be between 1 and 10000 (got 0)"},
        RangeCase{"MaxHeadersAtMost10000", "serving", "max_headers", 10001,
                  "must be between 1 and 10000"},
        RangeCase{"MaxHeadersIsAnInteger", "serving", "max_headers", 1.5,
                  "must be an integer (got number 1.5)"},
        RangeCase{"HeaderTimeoutPositive", "serving", "header_timeout_s", 0, "must be > 0"},
        RangeCase{"HeaderTimeoutBounded", "serving", "header_timeout_s", 1e8,
                  "must be <= 10000000"},
        RangeCase{"KeepaliveTimeoutPositive", "serving", "keepalive_timeout_s", -1, "must be > 0"},
        RangeCase{"KeepaliveTimeoutIsANumber", "serving", "keepalive_timeout_s", "60",
                  "must be a number of seconds (got string)"},
        RangeCase{"DurationsAtMost1e7Seconds", "serving", "request_timeout_s", 1e7 + 1,
                  "must be <= 10000000"},
        RangeCase{"FirstTokenTimeoutPositive", "engine", "first_token_timeout_s", 0, "must be > 0"},
        RangeCase{"DecodeReadTimeoutNonNegative", "engine", "decode_read_timeout_s", -1,
                  "must be >= 0"},
        RangeCase{"ConnectTimeoutPositive", "engine", "connect_timeout_s", 0, "must be > 0"},
        RangeCase{"HealthTimeoutPositive", "engine", "health_timeout_s", 0, "must be > 0"},
        RangeCase{"EngineConnectorNonEmpty", "engine", "connector", "", "must not be empty"},
        RangeCase{"EjectAfterAtLeast1", "recovery", "eject_after", 0, "must be >= 1 (got 0)"},
        RangeCase{"EjectAfterFitsInt", "recovery", "eject_after", 2147483648LL,
                  "must be <= 2147483647"},
        RangeCase{"FailureQuarantineNonNegative", "recovery", "failure_quarantine_s", -1,
                  "must be >= 0"},
        RangeCase{"ReadmitIntervalPositive", "recovery", "readmit_interval_s", 0, "must be > 0"},
        RangeCase{"LivenessIntervalNonNegative", "recovery", "liveness_interval_s", -1,
                  "must be >= 0"},
        RangeCase{"LivenessMissesAtLeast1", "recovery", "liveness_misses", 0, "must be >= 1"},
        RangeCase{"RestartPolicyKnown", "recovery", "engine_restart_policy", "wave",
                  "must be one of \"individual\", \"whole_wave\" (got \"wave\")"},
        RangeCase{"LoopPlacementKnown", "serving", "loop_placement", "balanced",
                  "must be one of \"pack\", \"spread\" (got \"balanced\")"},
        RangeCase{"MaxModelLenAtLeast1", "engine_contract", "max_model_len", 0,
                  "must be >= 1 (got 0)"},
        RangeCase{"ServingApiKeyEnvIsEnvName", "serving", "api_key_env", "1KEY",
                  "must be empty or an environment variable name matching "
                  "[A-Za-z_][A-Za-z0-9_]* (got \"1KEY\")"},
        RangeCase{"AdminTokenEnvIsEnvName", "admin", "token_env", "ADMIN-TOKEN",
                  "must be empty or an environment variable name"},
        RangeCase{"ContinuationMaxPerRequestNonNegative", "continuation", "max_per_request", -1,
                  "must be between 0 and 16 (got -1)"},
        RangeCase{"ContinuationMaxPerRequestAtMost16", "continuation", "max_per_request", 17,
                  "must be between 0 and 16 (got 17)"},
        RangeCase{"ContinuationBudgetNonNegative", "continuation", "budget", -1,
                  "must be >= 0 (got -1)"},
        RangeCase{"ContinuationBudgetBounded", "continuation", "budget", 1e10,
                  "must be <= 1000000000"},
        RangeCase{"ContinuationReplenishNonNegative", "continuation", "replenish", -0.1,
                  "must be >= 0 (got -0.1)"},
        RangeCase{"ContinuationReplenishAtMost1", "continuation", "replenish", 1.5,
                  "must be <= 1 (got 1.5)"},
        RangeCase{"EngineApiKeyEnvIsEnvName", "engine", "api_key_env", "$KEY",
                  "must be empty or an environment variable name"}),
    [](const ::testing::TestParamInfo<RangeCase>& info) { return info.param.name; });

// Values on the edge of each range are accepted.
TEST(ConfigRangeEdges, BoundaryValuesAccepted) {
  json config = MinimalConfig();
  config["serving"] = {{"max_attempts", 3},
                       {"request_timeout_s", 1e7},
                       {"prefill_timeout_s", 1e7},
                       {"handoff_timeout_s", 0},
                       {"retry_budget", 0},
                       {"retry_replenish", 1},
                       {"retry_base_s", 0},
                       {"retry_cap_s", 0},
                       {"max_inflight", 100000},
                       {"max_request_bytes", 1073741824},
                       {"graceful_timeout_s", 0},
                       {"api_key_env", "_K1"},
                       {"io_threads", 64},
                       {"max_connections", 1000000},
                       {"max_header_bytes", 1048576},
                       {"max_headers", 10000},
                       {"header_timeout_s", 1e7},
                       {"keepalive_timeout_s", 1e7}};
  config["engine"] = {
      {"first_token_timeout_s", 1e7}, {"decode_read_timeout_s", 0}, {"api_key_env", ""}};
  config["recovery"] = {{"eject_after", 1},
                        {"failure_quarantine_s", 0},
                        {"liveness_interval_s", 0},
                        {"liveness_misses", 1}};
  config["engine_contract"] = {{"vllm_version", "v"}, {"max_model_len", 1}};
  const Settings s = MustLoad(config);
  EXPECT_EQ(s.serving.max_attempts, 3);
  EXPECT_EQ(s.serving.max_request_bytes, 1073741824);
  EXPECT_EQ(s.serving.api_key_env, "_K1");
  EXPECT_EQ(s.engine_contract->max_model_len, 1);
  EXPECT_EQ(s.serving.io_threads, 64);
  EXPECT_EQ(s.serving.max_header_bytes, 1048576);

  config["serving"]["max_attempts"] = 1;
  config["serving"]["retry_replenish"] = 0;
  config["serving"]["max_inflight"] = 1;
  config["serving"]["max_request_bytes"] = 1024;
  config["serving"]["io_threads"] = 0;
  config["serving"]["max_connections"] = 1;
  config["serving"]["max_header_bytes"] = 1024;
  config["serving"]["max_headers"] = 1;
  config["serving"]["header_timeout_s"] = 0.001;
  config["serving"]["keepalive_timeout_s"] = 0.001;
  const Settings low = MustLoad(config);
  EXPECT_EQ(low.serving.max_connections, 1);
  EXPECT_EQ(low.serving.header_timeout_s, 0.001);
}

// ---------------------------------------------------------------------------
// Rules that relate two keys.

TEST(ConfigCrossField, PrefillTimeoutAtMostRequestTimeout) {
  json config = MinimalConfig();
  config["serving"] = {{"request_timeout_s", 60}, {"prefill_timeout_s", 61}};
  EXPECT_CONTAINS(LoadErrorOf(config),
                  "serving.prefill_timeout_s must be <= serving.request_timeout_s (60) (got 61)");
}

TEST(ConfigCrossField, DefaultPrefillTimeoutChecksAgainstShortRequestTimeout) {
  EXPECT_CONTAINS(LoadErrorOf(With("serving", "request_timeout_s", 30)),
                  "serving.prefill_timeout_s must be <= serving.request_timeout_s (30) (got 120)");
}

TEST(ConfigCrossField, HandoffTimeoutAtMostRequestTimeout) {
  json config = MinimalConfig();
  config["serving"] = {
      {"request_timeout_s", 60}, {"prefill_timeout_s", 10}, {"handoff_timeout_s", 60.5}};
  EXPECT_CONTAINS(LoadErrorOf(config),
                  "serving.handoff_timeout_s must be <= serving.request_timeout_s (60) "
                  "(got 60.5)");
}

TEST(ConfigCrossField, RetryCapAtLeastRetryBase) {
  json config = MinimalConfig();
  config["serving"] = {{"retry_base_s", 0.5}, {"retry_cap_s", 0.25}};
  EXPECT_CONTAINS(LoadErrorOf(config),
                  "serving.retry_cap_s must be >= serving.retry_base_s (0.5) (got 0.25)");
  EXPECT_CONTAINS(LoadErrorOf(With("serving", "retry_base_s", 2)),
                  "serving.retry_cap_s must be >= serving.retry_base_s (2) (got 1)");
}

TEST(ConfigCrossField, FirstTokenTimeoutAtMostRequestTimeout) {
  json config = MinimalConfig();
  config["serving"] = {{"request_timeout_s", 5}, {"prefill_timeout_s", 5}};
  config["engine"] = {{"first_token_timeout_s", 6}};
  EXPECT_CONTAINS(LoadErrorOf(config),
                  "engine.first_token_timeout_s must be <= serving.request_timeout_s (5) (got 6)");
}

TEST(ConfigCrossField, WholeWaveRequiresLiveness) {
  json config = MinimalConfig();
  config["recovery"] = {{"engine_restart_policy", "whole_wave"}, {"liveness_interval_s", 0}};
  EXPECT_CONTAINS(LoadErrorOf(config),
                  "recovery.engine_restart_policy \"whole_wave\" requires "
                  "recovery.liveness_interval_s > 0");
  config["recovery"]["liveness_interval_s"] = 1;
  EXPECT_EQ(MustLoad(config).recovery.engine_restart_policy, RestartPolicy::kWholeWave);
}

TEST(ConfigCrossField, SkippedWhenOneSideIsInvalid) {
  json config = MinimalConfig();
  config["serving"] = {{"request_timeout_s", -1}};
  config["engine"] = {{"first_token_timeout_s", 9999}};
  const std::string message = LoadErrorOf(config);
  EXPECT_CONTAINS(message, "serving.request_timeout_s must be > 0");
  EXPECT_EQ(message.find("prefill_timeout_s"), std::string::npos) << message;
  EXPECT_EQ(message.find("first_token_timeout_s"), std::string::npos) << message;
}

// ---------------------------------------------------------------------------
// Environment-variable names.

TEST(ConfigEnvNames, EmptyOrIdentifierAccepted) {
  json config = MinimalConfig();
  config["serving"]["api_key_env"] = "NARWHAL_API_KEY";
  config["admin"]["token_env"] = "";
  config["engine"]["api_key_env"] = "engine_key_2";
  const Settings s = MustLoad(config);
  EXPECT_EQ(s.serving.api_key_env, "NARWHAL_API_KEY");
  EXPECT_EQ(s.admin.token_env, "");
  EXPECT_EQ(s.engine.api_key_env, "engine_key_2");
}

// ---------------------------------------------------------------------------
// Files.

class TempFile {
 public:
  explicit TempFile(const std::string& contents) {
    char name[] = "/tmp/narwhal_config_test_XXXXXX";
    const int fd = mkstemp(name);
    EXPECT_GE(fd, 0);
    path_ = name;
    EXPECT_EQ(write(fd, contents.data(), contents.size()), static_cast<ssize_t>(contents.size()));
    close(fd);
  }
  ~TempFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(ConfigFile, MissingFileIsNotFound) {
  absl::StatusOr<Settings> s = LoadFleetConfig("/nonexistent/fleet.json");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kNotFound);
  EXPECT_CONTAINS(std::string(s.status().message()),
                  "config /nonexistent/fleet.json: cannot read: No such file or directory");
}

TEST(ConfigFile, DirectoryIsNotAFile) {
  absl::StatusOr<Settings> s = LoadFleetConfig("/tmp");
  ASSERT_FALSE(s.ok());
  EXPECT_CONTAINS(std::string(s.status().message()),
                  "config /tmp: cannot read: not a regular file");
}

TEST(ConfigFile, ErrorsNameTheFile) {
  TempFile file(With("serving", "max_attempts", 7).dump());
  absl::StatusOr<Settings> s = LoadFleetConfig(file.path());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_CONTAINS(std::string(s.status().message()),
                  "config " + file.path() + ": serving.max_attempts must be between 1 and 3");
}

TEST(ConfigFile, ValidFileLoads) {
  TempFile file(MinimalConfig().dump(2));
  absl::StatusOr<Settings> s = LoadFleetConfig(file.path());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->model, "m");
}

// ---------------------------------------------------------------------------
// What the schema check adds to protobuf's JSON parser, which accepts
// camelCase names, null, quoted and 3.0 integers and "NaN".

TEST(ConfigStrict, ProtobufLeniencyIsRejected) {
  EXPECT_CONTAINS(LoadErrorOf(With("serving", "maxAttempts", 2)),
                  "serving.maxAttempts: unknown key");
  EXPECT_CONTAINS(LoadErrorOf(With("serving", "max_attempts", nullptr)),
                  "serving.max_attempts must be an integer (got null)");
  EXPECT_CONTAINS(LoadErrorOf(With("serving", "max_inflight", "100")),
                  "serving.max_inflight must be an integer (got string \"100\")");
  EXPECT_CONTAINS(LoadErrorOf(With("serving", "request_timeout_s", "NaN")),
                  "serving.request_timeout_s must be a number of seconds (got string)");
  EXPECT_CONTAINS(LoadErrorOf(With("serving", "retry_budget", "Infinity")),
                  "serving.retry_budget must be a number (got string)");
  EXPECT_CONTAINS(LoadErrorOf(With("", "model", nullptr)), "model must be a string (got null)");
  EXPECT_CONTAINS(LoadErrorOf(With("", "engines", nullptr)), "engines must be an array (got null)");
}

TEST(ConfigStrict, SchemaAndValueErrorsAreReportedTogetherBySection) {
  json config = MinimalConfig();
  config["recovery"]["eject_after"] = 0;
  config["serving"]["max_attempts"] = "2";
  config["serving"]["max_inflight"] = 0;
  config["listen"]["http"] = 1;
  const std::string message = LoadErrorOf(config);
  EXPECT_CONTAINS(message,
                  "config: listen.http must be a string (got integer); "
                  "serving.max_attempts must be an integer (got string \"2\"); "
                  "serving.max_inflight must be between 1 and 100000 (got 0); "
                  "recovery.eject_after must be >= 1 (got 0)");
}

TEST(ConfigStrict, InvalidKeyAddsNoSecondMessage) {
  // A missing or ill-typed key is reported once, and rules that relate it to
  // another key are skipped.
  json config = MinimalConfig();
  config["serving"] = {{"request_timeout_s", "x"}, {"prefill_timeout_s", 9999}};
  config["engine"] = {{"first_token_timeout_s", 9999}};
  const std::string message = LoadErrorOf(config);
  EXPECT_EQ(message, "config: serving.request_timeout_s must be a number of seconds (got string)");
  config = MinimalConfig();
  config["engines"][0]["role"] = 7;
  config["engines"][1].erase("url");
  EXPECT_EQ(LoadErrorOf(config),
            "config: engines[0].role must be a string (got integer); engines[1].url is required "
            "(or engines[1].dns with engines[1].port)");
}

// ---------------------------------------------------------------------------
// Engine identity and credentials.

TEST(ConfigEngineIdentity, DuplicateUrlsRejectedAfterNormalization) {
  json config = MinimalConfig();
  config["engines"][1]["url"] = "http://127.0.0.1:8100/";
  EXPECT_CONTAINS(LoadErrorOf(config),
                  "engines[1].url \"http://127.0.0.1:8100\" is a duplicate of engines[0].url");
  config["engines"] = {{{"iid", "a"}, {"url", "http://Engine-0:80"}},
                       {{"iid", "b"}, {"url", "http://engine-0:080/"}},
                       {{"iid", "c"}, {"url", "http://engine-0:81"}}};
  const std::string message = LoadErrorOf(config);
  EXPECT_CONTAINS(message,
                  "engines[1].url \"http://engine-0:080\" is a duplicate of engines[0].url");
  EXPECT_EQ(message.find("engines[2]"), std::string::npos) << message;
  // Same host, different ports: two engines.
  config["engines"].erase(1);
  EXPECT_EQ(MustLoad(config).engines.size(), 2u);
}

TEST(ConfigEngineIdentity, ConnectorMustBeKnown) {
  EXPECT_CONTAINS(LoadErrorOf(With("engine", "connector", "LMCacheConnectorV1")),
                  "engine.connector must be one of \"NixlConnector\" (got \"LMCacheConnectorV1\")");
  EXPECT_CONTAINS(
      LoadErrorOf(With("", "engine_contract", {{"vllm_version", "v"}, {"connector", "nixl"}})),
      "engine_contract.connector must be one of \"NixlConnector\" (got \"nixl\")");
  EXPECT_EQ(MustLoad(With("engine", "connector", "NixlConnector")).engine.connector,
            "NixlConnector");
}

TEST(ConfigEngineIdentity, IidIsBounded) {
  json config = MinimalConfig();
  config["engines"][0]["iid"] = std::string(1 << 20, 'p');
  const std::string message = LoadErrorOf(config);
  EXPECT_EQ(message, "config: engines[0].iid must be at most 64 characters (got 1048576)");
  config["engines"][0]["iid"] = std::string(64, 'p');
  EXPECT_EQ(MustLoad(config).engines[0].iid, std::string(64, 'p'));
  config["engines"][0]["iid"] = "prefill-0.rack_7";
  EXPECT_EQ(MustLoad(config).engines[0].iid, "prefill-0.rack_7");
  for (const char* bad : {"p/0", "p:0", "p0\xc3\xa9", "p\"0", "p\\0"}) {
    config["engines"][0]["iid"] = bad;
    EXPECT_CONTAINS(LoadErrorOf(config), "engines[0].iid must contain only [A-Za-z0-9._-]");
  }
}

TEST(ConfigEngineIdentity, CredentialsAreRejectedAndNeverPrinted) {
  for (const std::string url :
       {"http://admin:s3cr3t@10.0.0.1:8000", "http://admin:s3cr3t@10.0.0.1:8000/v1",
        "https://admin:s3cr3t@10.0.0.1", "http://admin:s3/cr3t@10.0.0.1:8000",
        "ftp://admin:s3cr3t@h", "admin:s3cr3t@10.0.0.1:8000"}) {
    SCOPED_TRACE(url);
    const std::string message = UrlError(url);
    EXPECT_CONTAINS(message,
                    "engines[0].url must be http(s)://host:port: credentials are not "
                    "allowed");
    EXPECT_EQ(message.find("s3cr3t"), std::string::npos) << message;
    EXPECT_EQ(message.find("admin"), std::string::npos) << message;
  }
  EXPECT_CONTAINS(UrlError("http://admin:s3cr3t@10.0.0.1:8000"),
                  "(got \"http://***@10.0.0.1:8000\")");
  const std::string listen = LoadErrorOf(With("listen", "admin", "ops:s3cr3t@127.0.0.1:1"));
  EXPECT_CONTAINS(listen,
                  "listen.admin must be HOST:PORT: credentials are not allowed (got "
                  "\"***@127.0.0.1:1\")");
  EXPECT_EQ(listen.find("s3cr3t"), std::string::npos) << listen;
  // Not even a syntax error echoes them.
  const std::string syntax =
      ErrorText(R"({"model": "m", "engines": [{"iid": "a", "url": "http://admin:s3cr3t@h:1)");
  EXPECT_CONTAINS(syntax, "invalid JSON at line 1");
  EXPECT_EQ(syntax.find("s3cr3t"), std::string::npos) << syntax;
}

// ---------------------------------------------------------------------------
// Keys that size a resource: each has an upper bound in the schema, and the
// maximum values start a router that serves.

TEST(ConfigResourceBounds, EveryCountAndNumberHasAnUpperBound) {
  // Counts without a bound of their own (eject_after, liveness_misses,
  // max_model_len) only compare; every other number has a (doc).max.
  const std::vector<std::string> capped_by_type = {"eject_after", "liveness_misses",
                                                   "max_model_len"};
  for (const google::protobuf::Descriptor* d :
       {config::v1::Serving::descriptor(), config::v1::EngineIo::descriptor(),
        config::v1::Recovery::descriptor(), config::v1::EngineContract::descriptor()}) {
    for (int i = 0; i < d->field_count(); ++i) {
      const google::protobuf::FieldDescriptor* f = d->field(i);
      if (f->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_STRING ||
          f->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE) {
        continue;  // strings; engine.tls (file paths and a name)
      }
      const config::v1::Doc& doc = f->options().GetExtension(config::v1::doc);
      const bool listed = std::find(capped_by_type.begin(), capped_by_type.end(), f->name()) !=
                          capped_by_type.end();
      EXPECT_EQ(doc.has_max(), !listed) << f->full_name();
      EXPECT_TRUE(doc.has_min()) << f->full_name();
    }
  }
  EXPECT_EQ(config::v1::FleetConfig::descriptor()
                ->FindFieldByName("engines")
                ->options()
                .GetExtension(config::v1::doc)
                .max(),
            1024);
}

json ManyEngines(int count) {
  json engines = json::array();
  for (int i = 0; i < count; ++i) {
    engines.push_back({{"iid", "e" + std::to_string(i)},
                       {"url", "http://10.0." + std::to_string(i / 200) + "." +
                                   std::to_string(i % 200) + ":8000"},
                       {"role", i % 2 == 0 ? "prefill" : "decode"}});
  }
  return engines;
}

TEST(ConfigResourceBounds, AtMost1024Engines) {
  const Settings s = MustLoad(With("", "engines", ManyEngines(1024)));
  ASSERT_EQ(s.engines.size(), 1024u);
  router::RealClock clock;
  router::Fleet fleet(s, clock, nullptr);  // per-engine state for all of them
  EXPECT_EQ(LoadErrorOf(With("", "engines", ManyEngines(1025))),
            "config: engines must have at most 1024 entries (got 1025)");
}

// Every key that sizes something at its maximum, on the embedded simulated
// fleet, wired as narwhal-serve wires its data plane: the loops start, and
// requests are served.
TEST(ConfigResourceBounds, MaximumValuesStartAndServe) {
  absl::StatusOr<std::unique_ptr<EmbeddedFleet>> embedded = EmbeddedFleet::Start();
  ASSERT_TRUE(embedded.ok()) << embedded.status();
  json config = SettingsToJson((*embedded)->settings());
  config["serving"] = {{"max_attempts", 3},          {"request_timeout_s", 1e7},
                       {"prefill_timeout_s", 1e7},   {"handoff_timeout_s", 9999999},
                       {"retry_budget", 1e9},        {"retry_replenish", 1},
                       {"max_inflight", 100000},     {"max_request_bytes", 1073741824},
                       {"graceful_timeout_s", 1e7},  {"io_threads", 64},
                       {"max_connections", 1000000}, {"max_header_bytes", 1048576},
                       {"max_headers", 10000},       {"header_timeout_s", 1e7},
                       {"keepalive_timeout_s", 1e7}};
  config["engine"] = {{"first_token_timeout_s", 1e7},
                      {"decode_read_timeout_s", 1e7},
                      {"connect_timeout_s", 1e7},
                      {"health_timeout_s", 1e7}};
  config["handoff"] = {{"lease_s", 1e7}};  // the age limit is below it
  config["recovery"] = {{"eject_after", INT_MAX},
                        {"failure_quarantine_s", 1e7},
                        {"readmit_interval_s", 1e7},
                        {"liveness_interval_s", 1e7},
                        {"liveness_misses", INT_MAX}};
  const Settings s = MustLoad(config);

  engines::IoLoops loops(s.serving.io_threads);
  EXPECT_EQ(loops.size(), 64);
  router::RealClock clock;
  engines::BeastEngineClient engine_client(EngineClientOptions(s), clock);
  router::Fleet fleet(s, clock, nullptr);
  router::Router router(s, engine_client, fleet, clock, nullptr, nullptr, 1);
  prometheus::Registry registry;
  OpenAiShim shim(s, router, fleet, clock, registry, "", loops);
  absl::StatusOr<int> port = shim.Bind("127.0.0.1", 0);
  ASSERT_TRUE(port.ok()) << port.status();
  shim.Start();

  for (const bool stream : {false, true}) {
    SCOPED_TRACE(stream ? "stream" : "no stream");
    const std::string body = json{
        {"model", s.model},
        {"prompt", "limits"},
        {"max_tokens", 3},
        {"stream", stream}}.dump();
    narwhal::testing::RawHttpClient client(*port);
    ASSERT_TRUE(client.connected());
    client.Send(
        "POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
        "Content-Length: " +
        std::to_string(body.size()) + "\r\n\r\n" + body);
    const std::optional<narwhal::testing::RawResponse> response =
        client.Read(std::chrono::seconds(20));
    ASSERT_TRUE(response.has_value());
    EXPECT_EQ(response->status, 200) << response->body;
    EXPECT_NE(response->body.find(stream ? "[DONE]" : "\"choices\""), std::string::npos)
        << response->body;
  }
  shim.StopAccepting();
  shim.Join();
}

// ---------------------------------------------------------------------------
// The schema's other forms.

TEST(ConfigSchema, SettingsToProtoSetsEveryField) {
  json config = With(
      "", "engine_contract",
      {{"vllm_version", "v"}, {"model", "m"}, {"max_model_len", 7}, {"system_fingerprint", "fp"}});
  config["engines"][0]["kv_engine_id"] = "engine-p0";
  config["engines"][0]["kv_events"] = "tcp://10.0.0.11:5557";
  config["engines"][0]["kv_events_replay"] = "tcp://10.0.0.11:5558";
  config["engines"].push_back({{"iid", "g"},
                               {"dns", "g.svc"},
                               {"port", 80},
                               {"kv_engine_id", "engine-g"},
                               {"kv_events", "tcp://g.svc:5557"},
                               {"kv_events_replay", "tcp://g.svc:5558"}});
  config["listen"] = {{"health", "127.0.0.1:8081"}};
  config["discovery"] = {{"dns_servers", {"127.0.0.1:53"}}};
  config["tracing"] = {{"otlp_endpoint", "http://127.0.0.1:4318/v1/traces"}};
  // Tenants: one key from a variable with every limit, one from a file.
  ASSERT_EQ(setenv("NARWHAL_TEST_PROTO_TENANT_KEY", "key-a", 1), 0);
  char key_path[] = "/tmp/narwhal-tenant-key-XXXXXX";
  const int key_fd = mkstemp(key_path);
  ASSERT_GE(key_fd, 0);
  ASSERT_EQ(write(key_fd, "key-b\n", 6), 6);
  close(key_fd);
  config["serving"]["api_keys"] = {{{"name", "a"},
                                    {"key_env", "NARWHAL_TEST_PROTO_TENANT_KEY"},
                                    {"max_inflight", 2},
                                    {"requests_per_s", 5},
                                    {"burst", 9}},
                                   {{"name", "b"}, {"key_file", key_path}}};
  Settings s = MustLoad(config);
  unlink(key_path);
  ASSERT_EQ(s.serving.api_keys.size(), 2u);
  EXPECT_EQ(s.serving.api_keys[0].key, "key-a");
  EXPECT_EQ(s.serving.api_keys[1].key, "key-b");
  const config::v1::FleetConfig proto = SettingsToProto(s);
  // The key's source is exported, never the key.
  EXPECT_EQ(proto.serving().api_keys(1).key_file(), key_path);
  EXPECT_EQ(proto.DebugString().find("key-a"), std::string::npos);
  EXPECT_EQ(proto.DebugString().find("key-b"), std::string::npos);
  // Every field of every message is present; an engine has its url or its
  // dns and port.
  std::vector<const google::protobuf::Message*> messages = {&proto,
                                                            &proto.listen(),
                                                            &proto.engines(0),
                                                            &proto.engines(2),
                                                            &proto.serving(),
                                                            &proto.serving().api_keys(0),
                                                            &proto.admin(),
                                                            &proto.engine(),
                                                            &proto.recovery(),
                                                            &proto.handoff(),
                                                            &proto.limits(),
                                                            &proto.placement(),
                                                            &proto.links(),
                                                            &proto.discovery(),
                                                            &proto.membership(),
                                                            &proto.kv_events(),
                                                            &proto.continuation(),
                                                            &proto.tracing(),
                                                            &proto.engine_contract()};
  for (const google::protobuf::Message* m : messages) {
    const google::protobuf::Descriptor* d = m->GetDescriptor();
    for (int i = 0; i < d->field_count(); ++i) {
      const google::protobuf::FieldDescriptor* f = d->field(i);
      if (m == &proto.engines(0) && (f->name() == "dns" || f->name() == "port")) {
        EXPECT_FALSE(m->GetReflection()->HasField(*m, f)) << f->full_name();
        continue;
      }
      if (m == &proto.serving().api_keys(0) && f->name() == "key_file") {
        EXPECT_EQ(proto.serving().api_keys(1).key_file(), key_path);
        continue;
      }
      if (m == &proto.engines(2) && f->name() == "url") {
        EXPECT_FALSE(m->GetReflection()->HasField(*m, f)) << f->full_name();
        continue;
      }
      if (f->is_repeated()) {
        EXPECT_GT(m->GetReflection()->FieldSize(*m, f), 0) << f->full_name();
      } else {
        EXPECT_TRUE(m->GetReflection()->HasField(*m, f)) << f->full_name();
      }
    }
  }
  EXPECT_EQ(proto.engine_contract().max_model_len(), 7);
}

TEST(ConfigSchema, StructFormEqualsJsonForm) {
  const Settings s = MustLoad(With("recovery", "failure_quarantine_s", 7.5));
  google::protobuf::Struct config;
  ASSERT_TRUE(SettingsToStruct(s, &config).ok());
  std::string text;
  ASSERT_TRUE(google::protobuf::util::MessageToJsonString(config, &text).ok());
  EXPECT_EQ(json::parse(text), SettingsToJson(s));
}

}  // namespace
}  // namespace narwhal::server
