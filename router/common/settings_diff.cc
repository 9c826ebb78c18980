#include "router/common/settings_diff.h"

#include <cstddef>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace narwhal::router {
namespace {

using Same = bool (*)(const Settings&, const Settings&);

// A key of a section: (running.*Section).*Field == (candidate.*Section).*Field.
template <auto Section, auto Field>
bool SameKey(const Settings& a, const Settings& b) {
  return (a.*Section).*Field == (b.*Section).*Field;
}

template <auto Field>
bool SameTopKey(const Settings& a, const Settings& b) {
  return a.*Field == b.*Field;
}

// A key of engine_contract, compared only when both pin a contract (whether
// one is pinned is the key `engine_contract`).
template <auto Field>
bool SameContractKey(const Settings& a, const Settings& b) {
  return !a.engine_contract || !b.engine_contract ||
         (*a.engine_contract).*Field == (*b.engine_contract).*Field;
}

// A key of engine.tls.
template <auto Field>
bool SameEngineTlsKey(const Settings& a, const Settings& b) {
  return a.engine.tls.*Field == b.engine.tls.*Field;
}

bool SameContractPresence(const Settings& a, const Settings& b) {
  return a.engine_contract.has_value() == b.engine_contract.has_value();
}

// serving.api_keys: the entries as the file writes them, and the keys read
// from their variables and files (a rotated key file is a change that a
// reload applies) when both sides carry keys — a running router's effective
// configuration shows none.
bool SameApiKeys(const Settings& a, const Settings& b) {
  const std::vector<TenantSettings>& x = a.serving.api_keys;
  const std::vector<TenantSettings>& y = b.serving.api_keys;
  if (x.size() != y.size()) return false;
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i].name != y[i].name || x[i].key_env != y[i].key_env || x[i].key_file != y[i].key_file ||
        x[i].max_inflight != y[i].max_inflight || x[i].requests_per_s != y[i].requests_per_s ||
        x[i].burst != y[i].burst) {
      return false;
    }
    if (!x[i].key.empty() && !y[i].key.empty() && x[i].key != y[i].key) return false;
  }
  return true;
}

struct KeyRow {
  std::string_view path;
  Same same;
};

using S = Settings;

// Every key of the file but the engines, in the schema's order
// (proto/narwhal/config/v1/config.proto; tests/server/readme_config_test
// keeps the two equal).
const std::vector<KeyRow>& KeyRows() {
  static const std::vector<KeyRow> rows = {
      {"model", &SameTopKey<&S::model>},
      {"listen.http", &SameKey<&S::listen, &ListenSettings::http>},
      {"listen.grpc", &SameKey<&S::listen, &ListenSettings::grpc>},
      {"listen.admin", &SameKey<&S::listen, &ListenSettings::admin>},
      {"listen.health", &SameKey<&S::listen, &ListenSettings::health>},
      {"engine_contract", &SameContractPresence},
      {"engine_contract.vllm_version", &SameContractKey<&EngineContract::vllm_version>},
      {"engine_contract.model", &SameContractKey<&EngineContract::model>},
      {"engine_contract.max_model_len", &SameContractKey<&EngineContract::max_model_len>},
      {"engine_contract.connector", &SameContractKey<&EngineContract::connector>},
      {"engine_contract.system_fingerprint", &SameContractKey<&EngineContract::system_fingerprint>},
      {"serving.max_attempts", &SameKey<&S::serving, &ServingSettings::max_attempts>},
      {"serving.request_timeout_s", &SameKey<&S::serving, &ServingSettings::request_timeout_s>},
      {"serving.prefill_timeout_s", &SameKey<&S::serving, &ServingSettings::prefill_timeout_s>},
      {"serving.handoff_timeout_s", &SameKey<&S::serving, &ServingSettings::handoff_timeout_s>},
      {"serving.retry_budget", &SameKey<&S::serving, &ServingSettings::retry_budget>},
      {"serving.retry_replenish", &SameKey<&S::serving, &ServingSettings::retry_replenish>},
      {"serving.retry_base_s", &SameKey<&S::serving, &ServingSettings::retry_base_s>},
      {"serving.retry_cap_s", &SameKey<&S::serving, &ServingSettings::retry_cap_s>},
      {"serving.max_inflight", &SameKey<&S::serving, &ServingSettings::max_inflight>},
      {"serving.max_request_bytes", &SameKey<&S::serving, &ServingSettings::max_request_bytes>},
      {"serving.graceful_timeout_s", &SameKey<&S::serving, &ServingSettings::graceful_timeout_s>},
      {"serving.api_key_env", &SameKey<&S::serving, &ServingSettings::api_key_env>},
      {"serving.io_threads", &SameKey<&S::serving, &ServingSettings::io_threads>},
      {"serving.max_connections", &SameKey<&S::serving, &ServingSettings::max_connections>},
      {"serving.max_header_bytes", &SameKey<&S::serving, &ServingSettings::max_header_bytes>},
      {"serving.max_headers", &SameKey<&S::serving, &ServingSettings::max_headers>},
      {"serving.header_timeout_s", &SameKey<&S::serving, &ServingSettings::header_timeout_s>},
      {"serving.keepalive_timeout_s", &SameKey<&S::serving, &ServingSettings::keepalive_timeout_s>},
      {"serving.api_keys", &SameApiKeys},
      {"serving.loop_placement", &SameKey<&S::serving, &ServingSettings::loop_placement>},
      {"admin.token_env", &SameKey<&S::admin, &AdminSettings::token_env>},
      {"admin.max_watchers", &SameKey<&S::admin, &AdminSettings::max_watchers>},
      {"admin.watch_buffer_bytes", &SameKey<&S::admin, &AdminSettings::watch_buffer_bytes>},
      {"admin.watch_queue", &SameKey<&S::admin, &AdminSettings::watch_queue>},
      {"admin.watch_stall_timeout_s", &SameKey<&S::admin, &AdminSettings::watch_stall_timeout_s>},
      {"engine.first_token_timeout_s",
       &SameKey<&S::engine, &EngineIoSettings::first_token_timeout_s>},
      {"engine.decode_read_timeout_s",
       &SameKey<&S::engine, &EngineIoSettings::decode_read_timeout_s>},
      {"engine.connect_timeout_s", &SameKey<&S::engine, &EngineIoSettings::connect_timeout_s>},
      {"engine.health_timeout_s", &SameKey<&S::engine, &EngineIoSettings::health_timeout_s>},
      {"engine.connector", &SameKey<&S::engine, &EngineIoSettings::connector>},
      {"engine.api_key_env", &SameKey<&S::engine, &EngineIoSettings::api_key_env>},
      {"engine.tls.ca_file", &SameEngineTlsKey<&EngineTlsSettings::ca_file>},
      {"engine.tls.cert_file", &SameEngineTlsKey<&EngineTlsSettings::cert_file>},
      {"engine.tls.key_file", &SameEngineTlsKey<&EngineTlsSettings::key_file>},
      {"engine.tls.server_name", &SameEngineTlsKey<&EngineTlsSettings::server_name>},
      {"recovery.eject_after", &SameKey<&S::recovery, &RecoverySettings::eject_after>},
      {"recovery.failure_quarantine_s",
       &SameKey<&S::recovery, &RecoverySettings::failure_quarantine_s>},
      {"recovery.readmit_interval_s",
       &SameKey<&S::recovery, &RecoverySettings::readmit_interval_s>},
      {"recovery.liveness_interval_s",
       &SameKey<&S::recovery, &RecoverySettings::liveness_interval_s>},
      {"recovery.liveness_misses", &SameKey<&S::recovery, &RecoverySettings::liveness_misses>},
      {"recovery.engine_restart_policy",
       &SameKey<&S::recovery, &RecoverySettings::engine_restart_policy>},
      {"limits.max_tokens", &SameKey<&S::limits, &LimitSettings::max_tokens>},
      {"limits.max_messages", &SameKey<&S::limits, &LimitSettings::max_messages>},
      {"limits.max_prompts", &SameKey<&S::limits, &LimitSettings::max_prompts>},
      {"handoff.remote_host", &SameKey<&S::handoff, &HandoffSettings::remote_host>},
      {"handoff.lease_s", &SameKey<&S::handoff, &HandoffSettings::lease_s>},
      {"handoff.release", &SameKey<&S::handoff, &HandoffSettings::release>},
      {"handoff.release_max_inflight",
       &SameKey<&S::handoff, &HandoffSettings::release_max_inflight>},
      {"handoff.release_timeout_s", &SameKey<&S::handoff, &HandoffSettings::release_timeout_s>},
      {"tls.cert_file", &SameKey<&S::tls, &TlsSettings::cert_file>},
      {"tls.key_file", &SameKey<&S::tls, &TlsSettings::key_file>},
      {"placement.prefill", &SameKey<&S::placement, &PlacementSettings::prefill>},
      {"placement.index_chunks", &SameKey<&S::placement, &PlacementSettings::index_chunks>},
      {"placement.imbalance_abs", &SameKey<&S::placement, &PlacementSettings::imbalance_abs>},
      {"placement.imbalance_rel", &SameKey<&S::placement, &PlacementSettings::imbalance_rel>},
      {"placement.disaggregate", &SameKey<&S::placement, &PlacementSettings::disaggregate>},
      {"placement.min_uncached_tokens",
       &SameKey<&S::placement, &PlacementSettings::min_uncached_tokens>},
      {"links.hold_after", &SameKey<&S::links, &LinkSettings::hold_after>},
      {"links.window_s", &SameKey<&S::links, &LinkSettings::window_s>},
      {"discovery.dns_servers", &SameKey<&S::discovery, &DiscoverySettings::dns_servers>},
      {"discovery.dns_refresh_s", &SameKey<&S::discovery, &DiscoverySettings::dns_refresh_s>},
      {"discovery.dns_timeout_s", &SameKey<&S::discovery, &DiscoverySettings::dns_timeout_s>},
      {"membership.join_checks", &SameKey<&S::membership, &MembershipSettings::join_checks>},
      {"membership.drain_timeout_s",
       &SameKey<&S::membership, &MembershipSettings::drain_timeout_s>},
      {"membership.remember_s", &SameKey<&S::membership, &MembershipSettings::remember_s>},
      {"membership.config_poll_s", &SameKey<&S::membership, &MembershipSettings::config_poll_s>},
      {"kv_events.topic", &SameKey<&S::kv_events, &KvEventsSettings::topic>},
      {"kv_events.block_size", &SameKey<&S::kv_events, &KvEventsSettings::block_size>},
      {"kv_events.replay_timeout_s", &SameKey<&S::kv_events, &KvEventsSettings::replay_timeout_s>},
      {"kv_events.max_blocks_per_engine",
       &SameKey<&S::kv_events, &KvEventsSettings::max_blocks_per_engine>},
      {"kv_events.tokenizer", &SameKey<&S::kv_events, &KvEventsSettings::tokenizer>},
      {"kv_events.tokenize_timeout_s",
       &SameKey<&S::kv_events, &KvEventsSettings::tokenize_timeout_s>},
      {"continuation.enabled", &SameKey<&S::continuation, &ContinuationSettings::enabled>},
      {"continuation.max_per_request",
       &SameKey<&S::continuation, &ContinuationSettings::max_per_request>},
      {"continuation.budget", &SameKey<&S::continuation, &ContinuationSettings::budget>},
      {"continuation.replenish", &SameKey<&S::continuation, &ContinuationSettings::replenish>},
      {"tracing.otlp_endpoint", &SameKey<&S::tracing, &TracingSettings::otlp_endpoint>},
      {"tracing.max_queued_spans", &SameKey<&S::tracing, &TracingSettings::max_queued_spans>},
      {"tracing.export_interval_s", &SameKey<&S::tracing, &TracingSettings::export_interval_s>},
      {"tracing.export_timeout_s", &SameKey<&S::tracing, &TracingSettings::export_timeout_s>},
  };
  return rows;
}

// What differs between two entries with one iid (EngineChange::fields).
std::vector<std::string> EngineDifferences(const EngineSettings& a, const EngineSettings& b) {
  std::vector<std::string> fields;
  if (a.url != b.url) fields.push_back("url");
  if (a.role != b.role) fields.push_back("role");
  if (a.kv_engine_id != b.kv_engine_id) fields.push_back("kv_engine_id");
  if (a.dns != b.dns) fields.push_back("dns");
  if (a.port != b.port) fields.push_back("port");
  if (a.kv_events != b.kv_events) fields.push_back("kv_events");
  if (a.kv_events_replay != b.kv_events_replay) fields.push_back("kv_events_replay");
  return fields;
}

constexpr size_t kMaxNamesShown = 16;

// "a, b, c", at most kMaxNamesShown names, then "and N more".
std::string NameList(const std::vector<std::string>& names) {
  if (names.size() <= kMaxNamesShown) return absl::StrJoin(names, ", ");
  const std::vector<std::string> shown(names.begin(), names.begin() + kMaxNamesShown);
  return absl::StrCat(absl::StrJoin(shown, ", "), " and ", names.size() - kMaxNamesShown, " more");
}

}  // namespace

const std::vector<std::string_view>& RestartKeyPatterns() {
  // The listeners are bound, the TLS files read (the listeners' and the
  // engine client's), the admin service built,
  // the event loops and the HTTP door's connection table sized, its head
  // and body bounds and the clients' API key set (and the gRPC server's
  // message bound derived) at start-up; the model name is what every engine
  // was checked against; the KV-event subscriber's topic, block size and
  // bounds are fixed when it starts (the engines' endpoints follow reloads,
  // and the tokenizer is read per request).
  static const std::vector<std::string_view> patterns = {
      "model",
      "listen.*",
      "tls.*",
      "engine.tls.*",
      "admin.*",
      "serving.io_threads",
      "serving.loop_placement",
      "serving.max_connections",
      "serving.max_request_bytes",
      "serving.api_key_env",
      "serving.max_header_bytes",
      "serving.max_headers",
      "serving.header_timeout_s",
      "serving.keepalive_timeout_s",
      "kv_events.topic",
      "kv_events.block_size",
      "kv_events.replay_timeout_s",
      "kv_events.max_blocks_per_engine",
      "tracing.*",
  };
  return patterns;
}

bool NeedsRestart(std::string_view path) {
  for (const std::string_view pattern : RestartKeyPatterns()) {
    if (pattern.ends_with(".*")) {
      if (path.starts_with(pattern.substr(0, pattern.size() - 1))) return true;
    } else if (path == pattern) {
      return true;
    }
  }
  return false;
}

std::vector<std::string> DiffedKeys() {
  std::vector<std::string> keys;
  for (const KeyRow& row : KeyRows()) keys.emplace_back(row.path);
  return keys;
}

ConfigChange DiffSettings(const Settings& running, const Settings& candidate) {
  ConfigChange change;
  for (const KeyRow& row : KeyRows()) {
    if (row.same(running, candidate)) continue;
    (NeedsRestart(row.path) ? change.restart_keys : change.changed_keys).emplace_back(row.path);
  }
  std::map<std::string_view, const EngineSettings*> before;
  for (const EngineSettings& e : running.engines) before.emplace(e.iid, &e);
  std::map<std::string_view, bool> after;
  for (const EngineSettings& e : candidate.engines) {
    after.emplace(e.iid, true);
    const auto it = before.find(e.iid);
    if (it == before.end()) {
      change.joined.push_back(e.iid);
    } else if (std::vector<std::string> fields = EngineDifferences(*it->second, e);
               !fields.empty()) {
      change.changed.push_back({e.iid, std::move(fields)});
    } else {
      change.unchanged.push_back(e.iid);
    }
  }
  for (const EngineSettings& e : running.engines) {
    if (!after.count(e.iid)) change.left.push_back(e.iid);
  }
  return change;
}

std::string ConfigChange::Summary() const {
  std::vector<std::string> parts;
  if (!restart_keys.empty()) parts.push_back("needs a restart: " + NameList(restart_keys));
  std::vector<std::string> engines;
  if (!joined.empty()) engines.push_back("joined " + NameList(joined));
  if (!left.empty()) engines.push_back("left " + NameList(left));
  if (!changed.empty()) {
    std::vector<std::string> names;
    for (const EngineChange& c : changed) {
      names.push_back(absl::StrCat(c.iid, " (", absl::StrJoin(c.fields, ", "), ")"));
    }
    engines.push_back("changed " + NameList(names));
  }
  if (!engines.empty()) parts.push_back("engines " + absl::StrJoin(engines, "; "));
  if (!changed_keys.empty()) parts.push_back("keys changed " + NameList(changed_keys));
  return parts.empty() ? "no change" : absl::StrJoin(parts, "; ");
}

nlohmann::json ConfigChange::ToJson() const {
  nlohmann::json changed_engines = nlohmann::json::array();
  for (const EngineChange& c : changed) {
    changed_engines.push_back({{"iid", c.iid}, {"fields", c.fields}});
  }
  return {{"needs_restart", restart_keys},
          {"keys_changed", changed_keys},
          {"engines",
           {{"joined", joined},
            {"left", left},
            {"changed", std::move(changed_engines)},
            {"unchanged", unchanged}}}};
}

std::string ConfigChange::RestartRefusal() const {
  if (restart_keys.empty()) return "";
  return "needs a restart: " + absl::StrJoin(restart_keys, ", ");
}

}  // namespace narwhal::router
