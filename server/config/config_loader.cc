#include "server/config/config_loader.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "engines/json_limits.h"
#include "server/config/bounded_file.h"
#include "server/config/error_report.h"
#include "server/config/json_syntax.h"
#include "server/config/schema_check.h"
#include "server/config/validate.h"
#include "server/tls_files.h"

namespace narwhal::server {
namespace {

using config_file::CheckSchema;
using config_file::Errors;
using config_file::ParseJson;
using config_file::ProtoJsonError;
using config_file::TypeName;
using config_file::Validate;

namespace pb = ::narwhal::config::v1;
using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using json = nlohmann::json;
using router::Settings;

constexpr size_t kMaxConfigFileBytes = size_t{16} << 20;

absl::StatusOr<Settings> Parse(std::string_view text, absl::string_view label,
                               const config_file::ValidateOptions& validate = {}) {
  Errors errors;
  std::optional<json> root = ParseJson(text, &errors);
  if (!root) return absl::InvalidArgumentError(errors.Join(label));
  if (!root->is_object()) {
    errors.Add(0, absl::StrCat("the top level must be a JSON object (got ", TypeName(*root), ")"));
    return absl::InvalidArgumentError(errors.Join(label));
  }
  const config_file::SchemaResult schema = CheckSchema(*root, &errors);
  const json& checked = schema.checked;
  pb::FleetConfig config;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  if (const auto status =
          google::protobuf::util::JsonStringToMessage(checked.dump(), &config, options);
      !status.ok()) {
    errors.Add(0, ProtoJsonError(status.message().as_string()));
    return absl::InvalidArgumentError(errors.Join(label));
  }
  Settings settings = Validate(config, schema.reported, &errors, validate);
  if (!errors.empty()) return absl::InvalidArgumentError(errors.Join(label));
  return settings;
}

// The whole file (a regular file of at most kMaxConfigFileBytes), or why not
// as "<label>: cannot read: why".
absl::StatusOr<std::string> ReadConfigFile(const std::string& path, absl::string_view label) {
  absl::StatusOr<std::string> text = config_file::ReadBoundedFile(path, kMaxConfigFileBytes);
  if (text.ok()) return text;
  return absl::Status(text.status().code(),
                      absl::StrCat(label, ": cannot read: ", text.status().message()));
}

std::string SettingsToJsonText(const Settings& s) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  std::string text;
  // Printing a message without Any fields cannot fail.
  (void)google::protobuf::util::MessageToJsonString(SettingsToProto(s), &text, options);
  return text;
}

}  // namespace

absl::StatusOr<Settings> ParseFleetConfig(std::string_view json_text) {
  return Parse(json_text, "config");
}

absl::StatusOr<Settings> LoadFleetConfig(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFleetConfigText(path);
  if (!text.ok()) return text.status();
  return ParseFleetConfigText(*text, path);
}

absl::StatusOr<std::string> ReadFleetConfigText(const std::string& path) {
  return ReadConfigFile(path, absl::StrCat("config ", path));
}

absl::StatusOr<Settings> ParseFleetConfigText(std::string_view json_text, const std::string& path) {
  return Parse(json_text, absl::StrCat("config ", path));
}

absl::StatusOr<Settings> ParseEffectiveConfig(std::string_view json_text) {
  config_file::ValidateOptions options;
  options.read_tls_files = false;
  return Parse(json_text, "running config", options);
}

pb::FleetConfig SettingsToProto(const Settings& s) {
  pb::FleetConfig c;
  c.set_model(s.model);
  c.mutable_listen()->set_http(s.listen.http);
  c.mutable_listen()->set_grpc(s.listen.grpc);
  c.mutable_listen()->set_admin(s.listen.admin);
  if (!s.listen.health.empty()) c.mutable_listen()->set_health(s.listen.health);
  for (const router::EngineSettings& e : s.engines) {
    pb::Engine* engine = c.add_engines();
    engine->set_iid(e.iid);
    if (e.is_dns_group()) {
      engine->set_dns(e.dns);
      engine->set_port(e.port);
    } else {
      engine->set_url(e.url);
    }
    engine->set_role(router::RoleName(e.role));
    if (!e.kv_engine_id.empty()) engine->set_kv_engine_id(e.kv_engine_id);
    if (!e.kv_events.empty()) engine->set_kv_events(e.kv_events);
    if (!e.kv_events_replay.empty()) engine->set_kv_events_replay(e.kv_events_replay);
  }
  if (s.engine_contract) {
    const router::EngineContract& in = *s.engine_contract;
    pb::EngineContract* out = c.mutable_engine_contract();
    out->set_vllm_version(in.vllm_version);
    if (in.model) out->set_model(*in.model);
    if (in.max_model_len) out->set_max_model_len(static_cast<int32_t>(*in.max_model_len));
    out->set_connector(in.connector);
    if (in.system_fingerprint) out->set_system_fingerprint(*in.system_fingerprint);
  }
  const router::ServingSettings& sv = s.serving;
  pb::Serving* serving = c.mutable_serving();
  serving->set_max_attempts(sv.max_attempts);
  serving->set_request_timeout_s(sv.request_timeout_s);
  serving->set_prefill_timeout_s(sv.prefill_timeout_s);
  serving->set_handoff_timeout_s(sv.handoff_timeout_s);
  serving->set_retry_budget(sv.retry_budget);
  serving->set_retry_replenish(sv.retry_replenish);
  serving->set_retry_base_s(sv.retry_base_s);
  serving->set_retry_cap_s(sv.retry_cap_s);
  serving->set_max_inflight(sv.max_inflight);
  serving->set_max_request_bytes(static_cast<int32_t>(sv.max_request_bytes));
  serving->set_graceful_timeout_s(sv.graceful_timeout_s);
  serving->set_api_key_env(sv.api_key_env);
  serving->set_io_threads(sv.io_threads);
  serving->set_loop_placement(sv.loop_placement == router::LoopPlacementPolicy::kSpread ? "spread"
                                                                                        : "pack");
  serving->set_max_connections(sv.max_connections);
  serving->set_max_header_bytes(sv.max_header_bytes);
  serving->set_max_headers(sv.max_headers);
  serving->set_header_timeout_s(sv.header_timeout_s);
  serving->set_keepalive_timeout_s(sv.keepalive_timeout_s);
  for (const router::TenantSettings& t : sv.api_keys) {
    pb::ApiKey* key = serving->add_api_keys();  // where the key is read from, never the key
    key->set_name(t.name);
    if (!t.key_env.empty()) key->set_key_env(t.key_env);
    if (!t.key_file.empty()) key->set_key_file(t.key_file);
    if (t.max_inflight > 0) key->set_max_inflight(t.max_inflight);
    if (t.requests_per_s > 0) {
      key->set_requests_per_s(t.requests_per_s);
      key->set_burst(t.burst);
    }
  }
  c.mutable_admin()->set_token_env(s.admin.token_env);
  c.mutable_admin()->set_max_watchers(s.admin.max_watchers);
  c.mutable_admin()->set_watch_buffer_bytes(s.admin.watch_buffer_bytes);
  c.mutable_admin()->set_watch_queue(s.admin.watch_queue);
  c.mutable_admin()->set_watch_stall_timeout_s(s.admin.watch_stall_timeout_s);
  pb::EngineIo* engine = c.mutable_engine();
  engine->set_first_token_timeout_s(s.engine.first_token_timeout_s);
  engine->set_decode_read_timeout_s(s.engine.decode_read_timeout_s);
  engine->set_connect_timeout_s(s.engine.connect_timeout_s);
  engine->set_health_timeout_s(s.engine.health_timeout_s);
  engine->set_connector(s.engine.connector);
  engine->set_api_key_env(s.engine.api_key_env);
  pb::EngineTls* engine_tls = engine->mutable_tls();  // empty: every key unset
  if (!s.engine.tls.ca_file.empty()) engine_tls->set_ca_file(s.engine.tls.ca_file);
  if (!s.engine.tls.cert_file.empty()) engine_tls->set_cert_file(s.engine.tls.cert_file);
  if (!s.engine.tls.key_file.empty()) engine_tls->set_key_file(s.engine.tls.key_file);
  if (!s.engine.tls.server_name.empty()) engine_tls->set_server_name(s.engine.tls.server_name);
  pb::Recovery* recovery = c.mutable_recovery();
  recovery->set_eject_after(s.recovery.eject_after);
  recovery->set_failure_quarantine_s(s.recovery.failure_quarantine_s);
  recovery->set_readmit_interval_s(s.recovery.readmit_interval_s);
  recovery->set_liveness_interval_s(s.recovery.liveness_interval_s);
  recovery->set_liveness_misses(s.recovery.liveness_misses);
  recovery->set_engine_restart_policy(
      s.recovery.engine_restart_policy == router::RestartPolicy::kWholeWave ? "whole_wave"
                                                                            : "individual");
  pb::Limits* limits = c.mutable_limits();
  limits->set_max_tokens(s.limits.max_tokens);
  limits->set_max_messages(s.limits.max_messages);
  limits->set_max_prompts(s.limits.max_prompts);
  pb::Tls* tls = c.mutable_tls();  // empty: plaintext
  if (s.tls.enabled()) {
    tls->set_cert_file(s.tls.cert_file);
    tls->set_key_file(s.tls.key_file);
  }
  c.mutable_handoff()->set_remote_host(s.handoff.remote_host);
  c.mutable_handoff()->set_lease_s(s.handoff.lease_s);
  c.mutable_handoff()->set_release(s.handoff.release);
  c.mutable_handoff()->set_release_max_inflight(s.handoff.release_max_inflight);
  c.mutable_handoff()->set_release_timeout_s(s.handoff.release_timeout_s);
  pb::Placement* placement = c.mutable_placement();
  placement->set_prefill(s.placement.prefill);
  placement->set_index_chunks(s.placement.index_chunks);
  placement->set_imbalance_abs(s.placement.imbalance_abs);
  placement->set_imbalance_rel(s.placement.imbalance_rel);
  placement->set_disaggregate(s.placement.disaggregate);
  placement->set_min_uncached_tokens(s.placement.min_uncached_tokens);
  c.mutable_links()->set_hold_after(s.links.hold_after);
  c.mutable_links()->set_window_s(s.links.window_s);
  pb::Discovery* discovery = c.mutable_discovery();
  for (const std::string& server : s.discovery.dns_servers) discovery->add_dns_servers(server);
  discovery->set_dns_refresh_s(s.discovery.dns_refresh_s);
  discovery->set_dns_timeout_s(s.discovery.dns_timeout_s);
  pb::Membership* membership = c.mutable_membership();
  membership->set_join_checks(s.membership.join_checks);
  membership->set_drain_timeout_s(s.membership.drain_timeout_s);
  membership->set_remember_s(s.membership.remember_s);
  membership->set_config_poll_s(s.membership.config_poll_s);
  pb::KvEvents* kv_events = c.mutable_kv_events();
  kv_events->set_topic(s.kv_events.topic);
  kv_events->set_block_size(s.kv_events.block_size);
  kv_events->set_replay_timeout_s(s.kv_events.replay_timeout_s);
  kv_events->set_max_blocks_per_engine(s.kv_events.max_blocks_per_engine);
  kv_events->set_tokenizer(s.kv_events.tokenizer);
  kv_events->set_tokenize_timeout_s(s.kv_events.tokenize_timeout_s);
  pb::Continuation* continuation = c.mutable_continuation();
  continuation->set_enabled(s.continuation.enabled);
  continuation->set_max_per_request(s.continuation.max_per_request);
  continuation->set_budget(s.continuation.budget);
  continuation->set_replenish(s.continuation.replenish);
  pb::Tracing* tracing = c.mutable_tracing();
  if (!s.tracing.otlp_endpoint.empty()) tracing->set_otlp_endpoint(s.tracing.otlp_endpoint);
  tracing->set_max_queued_spans(s.tracing.max_queued_spans);
  tracing->set_export_interval_s(s.tracing.export_interval_s);
  tracing->set_export_timeout_s(s.tracing.export_timeout_s);
  return c;
}

nlohmann::json SettingsToJson(const Settings& s) {
  json out = json::parse(SettingsToJsonText(s), nullptr, /*allow_exceptions=*/false);
  // protobuf prints no empty list; the effective config names every key.
  if (!out["discovery"].contains("dns_servers")) out["discovery"]["dns_servers"] = json::array();
  return out;
}

absl::Status SettingsToStruct(const Settings& s, google::protobuf::Struct* out) {
  const auto status = google::protobuf::util::JsonStringToMessage(SettingsToJson(s).dump(), out);
  if (status.ok()) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("config as Struct: ", status.message().as_string()));
}

}  // namespace narwhal::server
