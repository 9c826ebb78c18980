// What a reload of the fleet file would change (router/common/settings_diff,
// SPEC §13 B20/B21): restart keys, other keys by path, and engines by iid —
// joined, left, changed (a leave and a join), unchanged.
#include "router/common/settings_diff.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace narwhal::router {
namespace {

using json = nlohmann::json;
using Names = std::vector<std::string>;

EngineSettings Engine(const std::string& iid, const std::string& url, Role role) {
  EngineSettings e;
  e.iid = iid;
  e.url = url;
  e.role = role;
  return e;
}

EngineSettings Group(const std::string& iid, const std::string& dns, int port, Role role) {
  EngineSettings e;
  e.iid = iid;
  e.dns = dns;
  e.port = port;
  e.role = role;
  return e;
}

Settings Fleet() {
  Settings s;
  s.model = "m";
  s.engines = {Engine("p0", "http://10.0.0.1:8000", Role::kPrefill),
               Engine("p1", "http://10.0.0.2:8000", Role::kPrefill),
               Engine("d0", "http://10.0.0.3:8000", Role::kDecode),
               Group("dg", "decode.llm.svc", 8000, Role::kDecode)};
  return s;
}

TEST(SettingsDiffTest, B20_IdenticalSettingsChangeNothing) {
  const ConfigChange change = DiffSettings(Fleet(), Fleet());
  EXPECT_TRUE(change.empty());
  EXPECT_FALSE(change.needs_restart());
  EXPECT_EQ(change.unchanged, (Names{"p0", "p1", "d0", "dg"}));
  EXPECT_EQ(change.Summary(), "no change");
  EXPECT_EQ(change.RestartRefusal(), "");
}

TEST(SettingsDiffTest, B21_EnginesAreMatchedByIidNotPosition) {
  Settings candidate = Fleet();
  std::swap(candidate.engines[0], candidate.engines[3]);
  std::swap(candidate.engines[1], candidate.engines[2]);
  const ConfigChange change = DiffSettings(Fleet(), candidate);
  EXPECT_TRUE(change.empty()) << change.Summary();
  EXPECT_EQ(change.unchanged, (Names{"dg", "d0", "p1", "p0"}));
}

TEST(SettingsDiffTest, B21_JoinedLeftChangedAndUnchanged) {
  Settings candidate = Fleet();
  candidate.engines.erase(candidate.engines.begin() + 2);  // d0 leaves
  candidate.engines[0].url = "http://10.0.0.9:8000";       // p0 moves
  candidate.engines[1].role = Role::kBoth;                 // p1 changes role
  candidate.engines[1].kv_engine_id = "engine-p1";         // ... and its kv id
  candidate.engines.push_back(Engine("p2", "http://10.0.0.4:8000", Role::kPrefill));  // joins
  const ConfigChange change = DiffSettings(Fleet(), candidate);
  EXPECT_EQ(change.joined, (Names{"p2"}));
  EXPECT_EQ(change.left, (Names{"d0"}));
  ASSERT_EQ(change.changed.size(), 2u);
  EXPECT_EQ(change.changed[0].iid, "p0");
  EXPECT_EQ(change.changed[0].fields, (Names{"url"}));
  EXPECT_EQ(change.changed[1].iid, "p1");
  EXPECT_EQ(change.changed[1].fields, (Names{"role", "kv_engine_id"}));
  EXPECT_EQ(change.unchanged, (Names{"dg"}));
  EXPECT_TRUE(change.changed_keys.empty());
  EXPECT_FALSE(change.needs_restart());
  EXPECT_EQ(change.Summary(),
            "engines joined p2; left d0; changed p0 (url), p1 (role, kv_engine_id)");
}

TEST(SettingsDiffTest, B21_DnsGroupChangesAreChanges) {
  Settings candidate = Fleet();
  candidate.engines[3].dns = "decode-v2.llm.svc";
  candidate.engines[3].port = 8001;
  ConfigChange change = DiffSettings(Fleet(), candidate);
  ASSERT_EQ(change.changed.size(), 1u);
  EXPECT_EQ(change.changed[0].fields, (Names{"dns", "port"}));

  // An engine that became a DNS group under the same iid.
  candidate = Fleet();
  candidate.engines[2] = Group("d0", "decode.llm.svc", 9000, Role::kDecode);
  change = DiffSettings(Fleet(), candidate);
  ASSERT_EQ(change.changed.size(), 1u);
  EXPECT_EQ(change.changed[0].iid, "d0");
  EXPECT_EQ(change.changed[0].fields, (Names{"url", "dns", "port"}));
}

TEST(SettingsDiffTest, B20_KeysAreNamedByPathInSchemaOrder) {
  Settings candidate = Fleet();
  candidate.recovery.eject_after = 5;
  candidate.serving.max_attempts = 2;
  candidate.membership.join_checks = false;
  candidate.discovery.dns_servers = {"10.96.0.10:53"};
  candidate.engine.first_token_timeout_s = 4;
  candidate.recovery.engine_restart_policy = RestartPolicy::kWholeWave;
  const ConfigChange change = DiffSettings(Fleet(), candidate);
  EXPECT_EQ(change.changed_keys, (Names{"serving.max_attempts", "engine.first_token_timeout_s",
                                        "recovery.eject_after", "recovery.engine_restart_policy",
                                        "discovery.dns_servers", "membership.join_checks"}));
  EXPECT_FALSE(change.needs_restart());
  EXPECT_EQ(change.Summary(),
            "keys changed serving.max_attempts, engine.first_token_timeout_s, "
            "recovery.eject_after, recovery.engine_restart_policy, discovery.dns_servers, "
            "membership.join_checks");
}

TEST(SettingsDiffTest, B20_RestartKeysAreSetApart) {
  Settings candidate = Fleet();
  candidate.model = "other";
  candidate.listen.http = "0.0.0.0:8000";
  candidate.listen.health = "0.0.0.0:8081";
  candidate.tls.cert_file = "c.pem";
  candidate.tls.key_file = "k.pem";
  candidate.admin.max_watchers = 1;
  candidate.serving.io_threads = 3;
  candidate.serving.loop_placement = LoopPlacementPolicy::kSpread;
  candidate.serving.max_connections = 10;
  candidate.serving.max_inflight = 10;  // live
  const ConfigChange change = DiffSettings(Fleet(), candidate);
  EXPECT_EQ(change.restart_keys,
            (Names{"model", "listen.http", "listen.health", "serving.io_threads",
                   "serving.max_connections", "serving.loop_placement", "admin.max_watchers",
                   "tls.cert_file", "tls.key_file"}));
  EXPECT_EQ(change.changed_keys, (Names{"serving.max_inflight"}));
  EXPECT_TRUE(change.needs_restart());
  EXPECT_EQ(change.RestartRefusal(),
            "needs a restart: model, listen.http, listen.health, serving.io_threads, "
            "serving.max_connections, serving.loop_placement, admin.max_watchers, tls.cert_file, "
            "tls.key_file");
  EXPECT_EQ(change.Summary().rfind("needs a restart: model, ", 0), 0u) << change.Summary();
}

TEST(SettingsDiffTest, RestartTableMatchesKeysAndSections) {
  for (const char* key :
       {"model", "listen.http", "listen.grpc", "listen.admin", "listen.health", "tls.cert_file",
        "tls.key_file", "admin.token_env", "admin.watch_stall_timeout_s", "serving.io_threads",
        "serving.loop_placement", "serving.max_connections", "serving.max_request_bytes",
        "serving.api_key_env", "serving.max_header_bytes", "serving.max_headers",
        "serving.header_timeout_s", "serving.keepalive_timeout_s"}) {
    EXPECT_TRUE(NeedsRestart(key)) << key;
  }
  for (const char* key :
       {"serving.max_inflight", "serving.max_attempts", "engine.api_key_env",
        "serving.request_timeout_s", "serving.graceful_timeout_s", "limits.max_tokens",
        "engine.first_token_timeout_s", "engine_contract.model", "models", "listener.http",
        "tlsx.a", "membership.config_poll_s", "discovery.dns_servers", "continuation.enabled",
        "continuation.max_per_request", "continuation.budget", "continuation.replenish"}) {
    EXPECT_FALSE(NeedsRestart(key)) << key;
  }
}

TEST(SettingsDiffTest, EngineContractPinnedUnpinnedAndChanged) {
  Settings pinned = Fleet();
  pinned.engine_contract.emplace();
  pinned.engine_contract->vllm_version = "0.29.1";
  ConfigChange change = DiffSettings(Fleet(), pinned);
  EXPECT_EQ(change.changed_keys, (Names{"engine_contract"}));
  change = DiffSettings(pinned, Fleet());
  EXPECT_EQ(change.changed_keys, (Names{"engine_contract"}));

  Settings other = pinned;
  other.engine_contract->vllm_version = "0.30.0";
  other.engine_contract->max_model_len = 4096;
  change = DiffSettings(pinned, other);
  EXPECT_EQ(change.changed_keys,
            (Names{"engine_contract.vllm_version", "engine_contract.max_model_len"}));
}

TEST(SettingsDiffTest, EveryKeyIsCompared) {
  // One change per key through the settings struct: each shows up by itself.
  const Settings base = Fleet();
  const std::vector<std::pair<std::string, std::function<void(Settings*)>>> edits = {
      {"listen.grpc", [](Settings* s) { s->listen.grpc = "x:1"; }},
      {"listen.admin", [](Settings* s) { s->listen.admin = "x:1"; }},
      {"serving.request_timeout_s", [](Settings* s) { s->serving.request_timeout_s = 1; }},
      {"serving.prefill_timeout_s", [](Settings* s) { s->serving.prefill_timeout_s = 1; }},
      {"serving.handoff_timeout_s", [](Settings* s) { s->serving.handoff_timeout_s = 1; }},
      {"serving.retry_budget", [](Settings* s) { s->serving.retry_budget = 1; }},
      {"serving.retry_replenish", [](Settings* s) { s->serving.retry_replenish = 1; }},
      {"serving.retry_base_s", [](Settings* s) { s->serving.retry_base_s = 1; }},
      {"serving.retry_cap_s", [](Settings* s) { s->serving.retry_cap_s = 2; }},
      {"serving.max_request_bytes", [](Settings* s) { s->serving.max_request_bytes = 1; }},
      {"serving.graceful_timeout_s", [](Settings* s) { s->serving.graceful_timeout_s = 1; }},
      {"serving.api_key_env", [](Settings* s) { s->serving.api_key_env = "K"; }},
      {"serving.max_header_bytes", [](Settings* s) { s->serving.max_header_bytes = 1; }},
      {"serving.max_headers", [](Settings* s) { s->serving.max_headers = 1; }},
      {"serving.header_timeout_s", [](Settings* s) { s->serving.header_timeout_s = 1; }},
      {"serving.keepalive_timeout_s", [](Settings* s) { s->serving.keepalive_timeout_s = 1; }},
      {"admin.token_env", [](Settings* s) { s->admin.token_env = "T"; }},
      {"admin.watch_buffer_bytes", [](Settings* s) { s->admin.watch_buffer_bytes = 1; }},
      {"admin.watch_queue", [](Settings* s) { s->admin.watch_queue = 1; }},
      {"admin.watch_stall_timeout_s", [](Settings* s) { s->admin.watch_stall_timeout_s = 1; }},
      {"engine.decode_read_timeout_s", [](Settings* s) { s->engine.decode_read_timeout_s = 1; }},
      {"engine.connect_timeout_s", [](Settings* s) { s->engine.connect_timeout_s = 1; }},
      {"engine.health_timeout_s", [](Settings* s) { s->engine.health_timeout_s = 1; }},
      {"engine.connector", [](Settings* s) { s->engine.connector = "X"; }},
      {"engine.api_key_env", [](Settings* s) { s->engine.api_key_env = "E"; }},
      {"recovery.failure_quarantine_s", [](Settings* s) { s->recovery.failure_quarantine_s = 1; }},
      {"recovery.readmit_interval_s", [](Settings* s) { s->recovery.readmit_interval_s = 1; }},
      {"recovery.liveness_interval_s", [](Settings* s) { s->recovery.liveness_interval_s = 1; }},
      {"recovery.liveness_misses", [](Settings* s) { s->recovery.liveness_misses = 9; }},
      {"limits.max_tokens", [](Settings* s) { s->limits.max_tokens = 1; }},
      {"limits.max_messages", [](Settings* s) { s->limits.max_messages = 1; }},
      {"limits.max_prompts", [](Settings* s) { s->limits.max_prompts = 1; }},
      {"handoff.remote_host", [](Settings* s) { s->handoff.remote_host = "match"; }},
      {"handoff.lease_s", [](Settings* s) { s->handoff.lease_s = 1; }},
      {"handoff.release", [](Settings* s) { s->handoff.release = "off"; }},
      {"handoff.release_max_inflight", [](Settings* s) { s->handoff.release_max_inflight = 1; }},
      {"handoff.release_timeout_s", [](Settings* s) { s->handoff.release_timeout_s = 1; }},
      {"placement.prefill", [](Settings* s) { s->placement.prefill = "least_loaded"; }},
      {"placement.index_chunks", [](Settings* s) { s->placement.index_chunks = 1; }},
      {"placement.imbalance_abs", [](Settings* s) { s->placement.imbalance_abs = 1; }},
      {"placement.imbalance_rel", [](Settings* s) { s->placement.imbalance_rel = 9; }},
      {"links.hold_after", [](Settings* s) { s->links.hold_after = 9; }},
      {"links.window_s", [](Settings* s) { s->links.window_s = 1; }},
      {"discovery.dns_refresh_s", [](Settings* s) { s->discovery.dns_refresh_s = 9; }},
      {"discovery.dns_timeout_s", [](Settings* s) { s->discovery.dns_timeout_s = 1; }},
      {"membership.drain_timeout_s", [](Settings* s) { s->membership.drain_timeout_s = 1; }},
      {"membership.remember_s", [](Settings* s) { s->membership.remember_s = 1; }},
      {"membership.config_poll_s", [](Settings* s) { s->membership.config_poll_s = 0; }},
      {"continuation.enabled", [](Settings* s) { s->continuation.enabled = true; }},
      {"continuation.max_per_request", [](Settings* s) { s->continuation.max_per_request = 3; }},
      {"continuation.budget", [](Settings* s) { s->continuation.budget = 1; }},
      {"continuation.replenish", [](Settings* s) { s->continuation.replenish = 0.5; }},
  };
  for (const auto& [key, edit] : edits) {
    Settings candidate = base;
    edit(&candidate);
    const ConfigChange change = DiffSettings(base, candidate);
    const Names& list = NeedsRestart(key) ? change.restart_keys : change.changed_keys;
    EXPECT_EQ(list, Names{key});
    EXPECT_EQ(change.restart_keys.size() + change.changed_keys.size(), 1u) << key;
  }
  Settings pinned = base;
  pinned.engine_contract.emplace();
  pinned.engine_contract->vllm_version = "v";
  Settings other = pinned;
  other.engine_contract->model = "x";
  other.engine_contract->connector = "X";
  other.engine_contract->system_fingerprint = "fp";
  EXPECT_EQ(DiffSettings(pinned, other).changed_keys,
            (Names{"engine_contract.model", "engine_contract.connector",
                   "engine_contract.system_fingerprint"}));
}

TEST(SettingsDiffTest, SummaryAndJsonForms) {
  Settings candidate = Fleet();
  candidate.engines.erase(candidate.engines.begin() + 2);
  candidate.engines[0].url = "http://10.0.0.9:8000";
  candidate.engines.push_back(Engine("p2", "http://10.0.0.4:8000", Role::kPrefill));
  candidate.serving.max_attempts = 2;
  candidate.recovery.eject_after = 5;
  candidate.listen.http = "0.0.0.0:1";
  const ConfigChange change = DiffSettings(Fleet(), candidate);
  EXPECT_EQ(change.Summary(),
            "needs a restart: listen.http; engines joined p2; left d0; changed p0 (url); "
            "keys changed serving.max_attempts, recovery.eject_after");
  EXPECT_EQ(change.ToJson(), json::parse(R"({
      "needs_restart": ["listen.http"],
      "keys_changed": ["serving.max_attempts", "recovery.eject_after"],
      "engines": {"joined": ["p2"], "left": ["d0"],
                  "changed": [{"iid": "p0", "fields": ["url"]}],
                  "unchanged": ["p1", "dg"]}})"));
  EXPECT_EQ(ConfigChange{}.ToJson(), json::parse(R"({"needs_restart": [], "keys_changed": [],
      "engines": {"joined": [], "left": [], "changed": [], "unchanged": []}})"));
}

TEST(SettingsDiffTest, SummaryIsBoundedForLargeFleets) {
  Settings running = Fleet();
  Settings candidate = Fleet();
  for (int i = 0; i < 1000; ++i) {
    candidate.engines.push_back(Engine(
        "new-" + std::to_string(i), "http://10.1.0.1:" + std::to_string(1000 + i), Role::kDecode));
  }
  const ConfigChange change = DiffSettings(running, candidate);
  EXPECT_EQ(change.joined.size(), 1000u);
  const std::string summary = change.Summary();
  EXPECT_LT(summary.size(), 400u) << summary;
  EXPECT_NE(summary.find("new-15 and 984 more"), std::string::npos) << summary;
  EXPECT_EQ(change.ToJson()["engines"]["joined"].size(), 1000u);
}

}  // namespace
}  // namespace narwhal::router
