#include "server/config/validate.h"

#include <google/protobuf/descriptor.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "engines/http/tls_client.h"
#include "narwhal/config/v1/config.pb.h"
#include "router/common/settings.h"
#include "server/config/address_rules.h"
#include "server/config/api_keys.h"
#include "server/config/error_report.h"
#include "server/config/fields.h"
#include "server/config/schema_check.h"
#include "server/tls_files.h"

namespace narwhal::server::config_file {

namespace pb = ::narwhal::config::v1;
using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using json = nlohmann::json;
using router::Settings;

namespace {

void ValidateListen(const Fields& f, router::ListenSettings* out) {
  f.HostPort(pb::Listen::kHttpFieldNumber, &out->http);
  f.HostPort(pb::Listen::kGrpcFieldNumber, &out->grpc);
  f.HostPort(pb::Listen::kAdminFieldNumber, &out->admin);
  f.HostPort(pb::Listen::kHealthFieldNumber, &out->health);
}

router::Role RoleNamed(const std::string& name) {
  if (name == "prefill") return router::Role::kPrefill;
  if (name == "decode") return router::Role::kDecode;
  return router::Role::kBoth;
}

// Where each engine id, and each engine address (a URL's or a DNS group's
// host and port, as HostIdentity spells the host), was first seen.
struct EngineIndex {
  struct Seen {
    std::string path;   // "engines[0].url"
    std::string shown;  // the value as the message shows it
    std::string iid;    // "" when the entry's iid is invalid
  };
  std::map<std::string, std::string> iid_paths;
  std::map<std::string, Seen> addresses;
};

// Reports the entry's address (`identity`) when an earlier entry has it.
void CheckUniqueAddress(const Fields& f, int number, const std::string& identity,
                        const std::string& shown, const std::string& iid, EngineIndex* seen) {
  const auto [it, inserted] =
      seen->addresses.emplace(identity, EngineIndex::Seen{f.PathOf(number), shown, iid});
  if (inserted) return;
  std::string whose;
  if (!iid.empty() && !it->second.iid.empty()) {
    whose = absl::StrCat("; ", Quote(iid), " and ", Quote(it->second.iid), " are one engine");
  }
  f.Error(number, absl::StrCat(shown, " is a duplicate of ", it->second.path, " ", it->second.shown,
                               " (the same host and port", whose, ")"));
}

// Returns false when the entry's role is invalid (then the fleet-level role
// check is skipped).
bool ValidateEngine(const Fields& f, EngineIndex* seen, router::EngineSettings* out) {
  using E = pb::Engine;
  std::string iid;
  if (f.String(E::kIidFieldNumber, &out->iid) && f.Present(E::kIidFieldNumber)) {
    if (!std::all_of(out->iid.begin(), out->iid.end(), IsIidChar)) {
      f.Error(E::kIidFieldNumber,
              absl::StrCat("must contain only [A-Za-z0-9._-] (got ", Quote(out->iid), ")"));
    } else if (const auto [it, inserted] =
                   seen->iid_paths.emplace(out->iid, f.PathOf(E::kIidFieldNumber));
               !inserted) {
      f.Error(E::kIidFieldNumber, absl::StrCat(Quote(out->iid), " is a duplicate of ", it->second));
    } else {
      iid = out->iid;
    }
  }
  const bool has_url = f.Present(E::kUrlFieldNumber) || f.Reported(E::kUrlFieldNumber);
  const bool has_dns = f.Present(E::kDnsFieldNumber) || f.Reported(E::kDnsFieldNumber);
  const bool has_port = f.Present(E::kPortFieldNumber) || f.Reported(E::kPortFieldNumber);
  if (!has_url && !has_dns) {
    f.Error(E::kUrlFieldNumber, absl::StrCat("is required (or ", f.PathOf(E::kDnsFieldNumber),
                                             " with ", f.PathOf(E::kPortFieldNumber), ")"));
  } else if (has_url && has_dns) {
    f.Error(E::kDnsFieldNumber, absl::StrCat("must not be set with ", f.PathOf(E::kUrlFieldNumber),
                                             " (an entry is one engine or one DNS group)"));
  } else if (has_dns && !has_port) {
    f.Error(E::kPortFieldNumber, absl::StrCat("is required with ", f.PathOf(E::kDnsFieldNumber)));
  }
  if (has_port && !has_dns) {
    f.Error(E::kPortFieldNumber, absl::StrCat("is only valid with ", f.PathOf(E::kDnsFieldNumber)));
  }

  std::string url;
  if (f.String(E::kUrlFieldNumber, &url) && f.Present(E::kUrlFieldNumber)) {
    std::string identity;
    if (std::optional<std::string> why = EngineUrlError(url, &out->url, &identity)) {
      f.Error(E::kUrlFieldNumber, absl::StrCat("must be http(s)://host:port: ", *why, " (got ",
                                               Quote(WithoutUserinfo(url)), ")"));
    } else if (!has_dns) {
      CheckUniqueAddress(f, E::kUrlFieldNumber, identity, Quote(out->url), iid, seen);
    }
  }
  std::string dns;
  const bool dns_ok = f.String(E::kDnsFieldNumber, &dns) && f.Present(E::kDnsFieldNumber);
  if (dns_ok) {
    if (std::optional<std::string> why = DnsNameError(dns)) {
      f.Error(E::kDnsFieldNumber, absl::StrCat("must be a host name: ", *why, " (got ",
                                               Quote(WithoutUserinfo(dns)), ")"));
    } else {
      out->dns = dns;
    }
  }
  int port = 0;
  if (f.Int(E::kPortFieldNumber, &port) && f.Present(E::kPortFieldNumber) && has_dns) {
    out->port = port;
  }
  if (!out->dns.empty() && out->port > 0 && !has_url) {
    CheckUniqueAddress(f, E::kDnsFieldNumber, absl::StrCat(HostIdentity(out->dns), " ", out->port),
                       absl::StrCat(Quote(out->dns), " port ", out->port), iid, seen);
  }
  f.String(E::kKvEngineIdFieldNumber, &out->kv_engine_id);
  for (const auto& [number, field] :
       {std::pair{E::kKvEventsFieldNumber, &out->kv_events},
        std::pair{E::kKvEventsReplayFieldNumber, &out->kv_events_replay}}) {
    std::string endpoint;
    if (!f.String(number, &endpoint) || !f.Present(number)) continue;
    if (std::optional<std::string> why = ZmqEndpointError(endpoint)) {
      f.Error(number, absl::StrCat("must be tcp://host:port: ", *why, " (got ",
                                   Quote(WithoutUserinfo(endpoint)), ")"));
    } else {
      *field = endpoint;
    }
  }
  if (f.Present(E::kKvEventsReplayFieldNumber) && !f.Present(E::kKvEventsFieldNumber)) {
    f.Error(E::kKvEventsReplayFieldNumber,
            absl::StrCat("is only valid with ", f.PathOf(E::kKvEventsFieldNumber)));
  }
  std::string role = "both";
  const bool role_ok = f.String(E::kRoleFieldNumber, &role);
  out->role = RoleNamed(role);
  return role_ok;
}

// Whether `iid` has the form of the iids of `group`'s members:
// "<group iid>-<ADDR>-<port>" (SPEC §13).
bool CouldBeMemberIid(const std::string& iid, const router::EngineSettings& group) {
  const std::string prefix = group.iid + "-";
  const std::string suffix = absl::StrCat("-", group.port);
  if (iid.size() <= prefix.size() + suffix.size() || !absl::StartsWith(iid, prefix) ||
      !absl::EndsWith(iid, suffix)) {
    return false;
  }
  const std::string_view addr =
      std::string_view(iid).substr(prefix.size(), iid.size() - prefix.size() - suffix.size());
  return addr.find_first_not_of("0123456789abcdefABCDEF.-") == std::string_view::npos;
}

// An engine given by url whose iid a DNS group member could take.
void CheckMemberIids(const std::vector<router::EngineSettings>& engines, const Fields& top) {
  for (const router::EngineSettings& group : engines) {
    if (!group.is_dns_group() || group.iid.empty() || group.port == 0) continue;
    for (size_t i = 0; i < engines.size(); ++i) {
      if (engines[i].is_dns_group() || !CouldBeMemberIid(engines[i].iid, group)) continue;
      top.errors()->Add(top.RankOf(pb::FleetConfig::kEnginesFieldNumber),
                        absl::StrCat("engines[", i, "].iid ", Quote(engines[i].iid),
                                     " is the iid a member of the DNS group ", Quote(group.iid),
                                     " may take (<iid>-<ADDR>-<PORT>)"));
    }
  }
}

void ValidateEngines(const pb::FleetConfig& config, const Fields& top,
                     std::vector<router::EngineSettings>* out) {
  if (!top.Entries(pb::FleetConfig::kEnginesFieldNumber)) return;
  const int rank = top.RankOf(pb::FleetConfig::kEnginesFieldNumber);
  EngineIndex seen;
  bool roles_ok = true;
  for (int i = 0; i < config.engines_size(); ++i) {
    const std::string path = absl::StrCat("engines[", i, "]");
    router::EngineSettings engine;
    if (top.reported().count(path)) {
      roles_ok = false;
    } else {
      roles_ok &= ValidateEngine(
          Fields(config.engines(i), path, rank, top.errors(), top.reported()), &seen, &engine);
    }
    out->push_back(std::move(engine));
  }
  CheckMemberIids(*out, top);
  if (!roles_ok) return;
  const bool can_prefill = std::any_of(out->begin(), out->end(),
                                       [](const auto& e) { return router::CanPrefill(e.role); });
  const bool can_decode = std::any_of(out->begin(), out->end(),
                                      [](const auto& e) { return router::CanDecode(e.role); });
  if (!can_prefill) top.errors()->Add(rank, "engines: no engine can serve the prefill role");
  if (!can_decode) top.errors()->Add(rank, "engines: no engine can serve the decode role");
}

void ValidateEngineContract(const Fields& f, router::EngineContract* out) {
  using C = pb::EngineContract;
  f.String(C::kVllmVersionFieldNumber, &out->vllm_version);
  f.OptionalString(C::kModelFieldNumber, &out->model);
  long long max_model_len = 0;
  if (f.Present(C::kMaxModelLenFieldNumber) && f.Int(C::kMaxModelLenFieldNumber, &max_model_len)) {
    out->max_model_len = max_model_len;
  }
  f.String(C::kConnectorFieldNumber, &out->connector);
  f.OptionalString(C::kSystemFingerprintFieldNumber, &out->system_fingerprint);
}

// Returns whether serving.request_timeout_s is valid (for cross-section rules).
bool ValidateServing(const Fields& f, const pb::Serving& serving, bool read_keys,
                     router::ServingSettings* out) {
  using S = pb::Serving;
  f.Int(S::kMaxAttemptsFieldNumber, &out->max_attempts);
  const bool request_ok = f.Number(S::kRequestTimeoutSFieldNumber, &out->request_timeout_s);
  const bool prefill_ok = f.Number(S::kPrefillTimeoutSFieldNumber, &out->prefill_timeout_s);
  const bool handoff_ok = f.Number(S::kHandoffTimeoutSFieldNumber, &out->handoff_timeout_s);
  f.Number(S::kRetryBudgetFieldNumber, &out->retry_budget);
  f.Number(S::kRetryReplenishFieldNumber, &out->retry_replenish);
  const bool base_ok = f.Number(S::kRetryBaseSFieldNumber, &out->retry_base_s);
  const bool cap_ok = f.Number(S::kRetryCapSFieldNumber, &out->retry_cap_s);
  f.Int(S::kMaxInflightFieldNumber, &out->max_inflight);
  f.Int(S::kMaxRequestBytesFieldNumber, &out->max_request_bytes);
  f.Number(S::kGracefulTimeoutSFieldNumber, &out->graceful_timeout_s);
  f.EnvVarName(S::kApiKeyEnvFieldNumber, &out->api_key_env);
  f.Int(S::kIoThreadsFieldNumber, &out->io_threads);
  std::string placement = "pack";
  f.String(S::kLoopPlacementFieldNumber, &placement);
  out->loop_placement = placement == "spread" ? router::LoopPlacementPolicy::kSpread
                                              : router::LoopPlacementPolicy::kPack;
  f.Int(S::kMaxConnectionsFieldNumber, &out->max_connections);
  f.Int(S::kMaxHeaderBytesFieldNumber, &out->max_header_bytes);
  f.Int(S::kMaxHeadersFieldNumber, &out->max_headers);
  f.Number(S::kHeaderTimeoutSFieldNumber, &out->header_timeout_s);
  f.Number(S::kKeepaliveTimeoutSFieldNumber, &out->keepalive_timeout_s);
  ValidateApiKeys(f, serving, read_keys, &out->api_keys);
  if (!out->api_key_env.empty() && serving.api_keys_size() > 0) {
    f.Error(S::kApiKeysFieldNumber,
            "and serving.api_key_env are both set: name every key in serving.api_keys");
  }

  const std::string request =
      absl::StrCat("serving.request_timeout_s (", FormatNumber(out->request_timeout_s), ")");
  if (request_ok && prefill_ok && out->prefill_timeout_s > out->request_timeout_s) {
    f.Error(
        S::kPrefillTimeoutSFieldNumber,
        absl::StrCat("must be <= ", request, " (got ", FormatNumber(out->prefill_timeout_s), ")"));
  }
  if (request_ok && handoff_ok && out->handoff_timeout_s > out->request_timeout_s) {
    f.Error(
        S::kHandoffTimeoutSFieldNumber,
        absl::StrCat("must be <= ", request, " (got ", FormatNumber(out->handoff_timeout_s), ")"));
  }
  if (base_ok && cap_ok && out->retry_cap_s < out->retry_base_s) {
    f.Error(S::kRetryCapSFieldNumber,
            absl::StrCat("must be >= serving.retry_base_s (", FormatNumber(out->retry_base_s),
                         ") (got ", FormatNumber(out->retry_cap_s), ")"));
  }
  return request_ok;
}

void ValidateAdmin(const Fields& f, router::AdminSettings* out) {
  using A = pb::Admin;
  f.EnvVarName(A::kTokenEnvFieldNumber, &out->token_env);
  f.Int(A::kMaxWatchersFieldNumber, &out->max_watchers);
  f.Int(A::kWatchBufferBytesFieldNumber, &out->watch_buffer_bytes);
  f.Int(A::kWatchQueueFieldNumber, &out->watch_queue);
  f.Number(A::kWatchStallTimeoutSFieldNumber, &out->watch_stall_timeout_s);
}

// `request_timeout_s` is nullopt when serving.request_timeout_s was invalid.
// engine.tls: the client certificate and key both or neither, and every
// file read and checked now (engines/http/tls_client.h), so a bad one stops
// narwhal-serve at start-up and narwhal-check reports it.
void ValidateEngineTls(const Fields& f, bool read_files, router::EngineTlsSettings* out) {
  using T = pb::EngineTls;
  router::EngineTlsSettings tls;
  const bool ok = f.String(T::kCaFileFieldNumber, &tls.ca_file) &&
                  f.String(T::kCertFileFieldNumber, &tls.cert_file) &&
                  f.String(T::kKeyFileFieldNumber, &tls.key_file) &&
                  f.String(T::kServerNameFieldNumber, &tls.server_name);
  if (!ok) return;
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    const int missing = tls.cert_file.empty() ? T::kCertFileFieldNumber : T::kKeyFileFieldNumber;
    const int given = tls.cert_file.empty() ? T::kKeyFileFieldNumber : T::kCertFileFieldNumber;
    f.Error(missing, absl::StrCat("is required with ", f.PathOf(given), " (both or neither)"));
    return;
  }
  if (read_files) {
    const std::string why =
        engines::TlsClientContext::Check(engines::EngineTlsOptions{.ca_file = tls.ca_file,
                                                                   .cert_file = tls.cert_file,
                                                                   .key_file = tls.key_file,
                                                                   .server_name = ""});
    if (!why.empty()) {
      f.errors()->Add(f.RankOf(T::kCaFileFieldNumber), why);
      return;
    }
  }
  *out = std::move(tls);
}

void ValidateEngineIo(const Fields& f, const pb::EngineIo& engine,
                      std::optional<double> request_timeout_s, bool read_files,
                      router::EngineIoSettings* out) {
  using E = pb::EngineIo;
  const bool first_ok = f.Number(E::kFirstTokenTimeoutSFieldNumber, &out->first_token_timeout_s);
  f.Number(E::kDecodeReadTimeoutSFieldNumber, &out->decode_read_timeout_s);
  f.Number(E::kConnectTimeoutSFieldNumber, &out->connect_timeout_s);
  f.Number(E::kHealthTimeoutSFieldNumber, &out->health_timeout_s);
  f.String(E::kConnectorFieldNumber, &out->connector);
  f.EnvVarName(E::kApiKeyEnvFieldNumber, &out->api_key_env);
  if (engine.has_tls()) {
    ValidateEngineTls(Fields(engine.tls(), f.PathOf(E::kTlsFieldNumber),
                             f.RankOf(E::kTlsFieldNumber), f.errors(), f.reported()),
                      read_files, &out->tls);
  }
  if (first_ok && request_timeout_s && out->first_token_timeout_s > *request_timeout_s) {
    f.Error(E::kFirstTokenTimeoutSFieldNumber,
            absl::StrCat("must be <= serving.request_timeout_s (", FormatNumber(*request_timeout_s),
                         ") (got ", FormatNumber(out->first_token_timeout_s), ")"));
  }
}

void ValidateRecovery(const Fields& f, router::RecoverySettings* out) {
  using R = pb::Recovery;
  f.Int(R::kEjectAfterFieldNumber, &out->eject_after);
  f.Number(R::kFailureQuarantineSFieldNumber, &out->failure_quarantine_s);
  f.Number(R::kReadmitIntervalSFieldNumber, &out->readmit_interval_s);
  const bool liveness_ok = f.Number(R::kLivenessIntervalSFieldNumber, &out->liveness_interval_s);
  f.Int(R::kLivenessMissesFieldNumber, &out->liveness_misses);
  std::string policy = "individual";
  const bool policy_ok = f.String(R::kEngineRestartPolicyFieldNumber, &policy);
  out->engine_restart_policy = policy == "whole_wave" ? router::RestartPolicy::kWholeWave
                                                      : router::RestartPolicy::kIndividual;
  if (policy_ok && liveness_ok && out->engine_restart_policy == router::RestartPolicy::kWholeWave &&
      out->liveness_interval_s <= 0) {
    f.Error(R::kEngineRestartPolicyFieldNumber,
            "\"whole_wave\" requires recovery.liveness_interval_s > 0 (liveness sweeps detect "
            "engine restarts)");
  }
}

void ValidateLimits(const Fields& f, router::LimitSettings* out) {
  using L = pb::Limits;
  f.Int(L::kMaxTokensFieldNumber, &out->max_tokens);
  f.Int(L::kMaxMessagesFieldNumber, &out->max_messages);
  f.Int(L::kMaxPromptsFieldNumber, &out->max_prompts);
}

// Both files or neither. The pair is read and checked here
// (server/tls_files), so a bad one stops narwhal-serve before anything is
// bound, and narwhal-check reports it.
void ValidateTls(const Fields& f, bool read_files, router::TlsSettings* out) {
  using T = pb::Tls;
  std::string cert;
  std::string key;
  const bool cert_ok = f.String(T::kCertFileFieldNumber, &cert);
  const bool key_ok = f.String(T::kKeyFileFieldNumber, &key);
  if (!cert_ok || !key_ok) return;
  if (cert.empty() != key.empty()) {
    const int missing = cert.empty() ? T::kCertFileFieldNumber : T::kKeyFileFieldNumber;
    const int given = cert.empty() ? T::kKeyFileFieldNumber : T::kCertFileFieldNumber;
    f.Error(missing, absl::StrCat("is required with ", f.PathOf(given), " (both or neither)"));
    return;
  }
  if (cert.empty()) return;
  const absl::StatusOr<TlsPem> pem =
      read_files ? LoadTlsFiles(cert, key) : absl::StatusOr<TlsPem>(TlsPem{});
  if (!pem.ok()) {
    f.errors()->Add(f.RankOf(T::kCertFileFieldNumber), std::string(pem.status().message()));
    return;
  }
  out->cert_file = std::move(cert);
  out->key_file = std::move(key);
}

// Returns whether handoff.lease_s is valid (for the age rule).
bool ValidateHandoff(const Fields& f, router::HandoffSettings* out) {
  using H = pb::Handoff;
  f.String(H::kRemoteHostFieldNumber, &out->remote_host);
  f.String(H::kReleaseFieldNumber, &out->release);
  f.Int(H::kReleaseMaxInflightFieldNumber, &out->release_max_inflight);
  f.Number(H::kReleaseTimeoutSFieldNumber, &out->release_timeout_s);
  return f.Number(H::kLeaseSFieldNumber, &out->lease_s);
}

void ValidatePlacement(const Fields& f, router::PlacementSettings* out) {
  using P = pb::Placement;
  f.String(P::kPrefillFieldNumber, &out->prefill);
  f.Int(P::kIndexChunksFieldNumber, &out->index_chunks);
  f.Int(P::kImbalanceAbsFieldNumber, &out->imbalance_abs);
  f.Number(P::kImbalanceRelFieldNumber, &out->imbalance_rel);
  f.String(P::kDisaggregateFieldNumber, &out->disaggregate);
  f.Int(P::kMinUncachedTokensFieldNumber, &out->min_uncached_tokens);
}

void ValidateLinks(const Fields& f, router::LinkSettings* out) {
  using L = pb::Links;
  f.Int(L::kHoldAfterFieldNumber, &out->hold_after);
  f.Number(L::kWindowSFieldNumber, &out->window_s);
}

void ValidateDiscovery(const Fields& f, const pb::Discovery& discovery,
                       router::DiscoverySettings* out) {
  using D = pb::Discovery;
  if (f.Entries(D::kDnsServersFieldNumber)) {
    for (int i = 0; i < discovery.dns_servers_size(); ++i) {
      const std::string path = absl::StrCat(f.PathOf(D::kDnsServersFieldNumber), "[", i, "]");
      if (f.reported().count(path)) continue;
      const std::string& server = discovery.dns_servers(i);
      if (std::optional<std::string> why = HostPortError(server, 1)) {
        f.errors()->Add(f.RankOf(D::kDnsServersFieldNumber),
                        absl::StrCat(path, " must be HOST:PORT: ", *why, " (got ",
                                     Quote(WithoutUserinfo(server)), ")"));
      } else {
        out->dns_servers.push_back(server);
      }
    }
  }
  const bool refresh_ok = f.Number(D::kDnsRefreshSFieldNumber, &out->dns_refresh_s);
  const bool timeout_ok = f.Number(D::kDnsTimeoutSFieldNumber, &out->dns_timeout_s);
  if (refresh_ok && timeout_ok && out->dns_timeout_s > out->dns_refresh_s) {
    f.Error(D::kDnsTimeoutSFieldNumber,
            absl::StrCat("must be <= discovery.dns_refresh_s (", FormatNumber(out->dns_refresh_s),
                         ") (got ", FormatNumber(out->dns_timeout_s), ")"));
  }
}

void ValidateKvEvents(const Fields& f, router::KvEventsSettings* out) {
  using K = pb::KvEvents;
  f.String(K::kTopicFieldNumber, &out->topic);
  f.Int(K::kBlockSizeFieldNumber, &out->block_size);
  f.Number(K::kReplayTimeoutSFieldNumber, &out->replay_timeout_s);
  f.Int(K::kMaxBlocksPerEngineFieldNumber, &out->max_blocks_per_engine);
  f.Number(K::kTokenizeTimeoutSFieldNumber, &out->tokenize_timeout_s);
  std::string tokenizer;
  if (f.String(K::kTokenizerFieldNumber, &tokenizer) && f.Present(K::kTokenizerFieldNumber)) {
    std::string normalized = tokenizer;
    std::string identity;
    if (tokenizer != "engine") {
      if (std::optional<std::string> why = EngineUrlError(tokenizer, &normalized, &identity)) {
        f.Error(K::kTokenizerFieldNumber,
                absl::StrCat("must be \"engine\" or http(s)://host:port: ", *why, " (got ",
                             Quote(WithoutUserinfo(tokenizer)), ")"));
        return;
      }
    }
    out->tokenizer = normalized;
  }
}

void ValidateMembership(const Fields& f, router::MembershipSettings* out) {
  using M = pb::Membership;
  f.Bool(M::kJoinChecksFieldNumber, &out->join_checks);
  f.Number(M::kDrainTimeoutSFieldNumber, &out->drain_timeout_s);
  f.Number(M::kRememberSFieldNumber, &out->remember_s);
  f.Number(M::kConfigPollSFieldNumber, &out->config_poll_s);
}

void ValidateContinuation(const Fields& f, router::ContinuationSettings* out) {
  using C = pb::Continuation;
  f.Bool(C::kEnabledFieldNumber, &out->enabled);
  f.Int(C::kMaxPerRequestFieldNumber, &out->max_per_request);
  f.Number(C::kBudgetFieldNumber, &out->budget);
  f.Number(C::kReplenishFieldNumber, &out->replenish);
}

void ValidateTracing(const Fields& f, router::TracingSettings* out) {
  using T = pb::Tracing;
  std::string endpoint;
  if (f.String(T::kOtlpEndpointFieldNumber, &endpoint) && !endpoint.empty()) {
    constexpr std::string_view kScheme = "http://";
    const bool http = endpoint.rfind(kScheme, 0) == 0;
    const std::string_view rest = std::string_view(endpoint).substr(http ? kScheme.size() : 0);
    const std::string_view host_port = rest.substr(0, rest.find('/'));
    const std::optional<std::string> why =
        http ? HostPortError(host_port, 1) : std::optional<std::string>("not http://");
    if (why) {
      f.Error(T::kOtlpEndpointFieldNumber, absl::StrCat("must be http://host:port[/path]: ", *why,
                                                        " (got ", Quote(endpoint), ")"));
    } else {
      out->otlp_endpoint = std::move(endpoint);
    }
  }
  f.Int(T::kMaxQueuedSpansFieldNumber, &out->max_queued_spans);
  f.Number(T::kExportIntervalSFieldNumber, &out->export_interval_s);
  f.Number(T::kExportTimeoutSFieldNumber, &out->export_timeout_s);
}

// A handoff older than the producer's lease has lost its blocks, so the
// router's age limit is below the lease: an explicit one must be, and 0
// (the default) becomes 80% of the lease, capped by the request deadline.
void ApplyHandoffAge(const Fields* serving, router::Settings* s) {
  double& age = s->serving.handoff_timeout_s;
  if (age == 0) {
    age = std::min(0.8 * s->handoff.lease_s, s->serving.request_timeout_s);
  } else if (age >= s->handoff.lease_s && serving != nullptr) {
    serving->Error(pb::Serving::kHandoffTimeoutSFieldNumber,
                   absl::StrCat("must be < handoff.lease_s (", FormatNumber(s->handoff.lease_s),
                                ") (got ", FormatNumber(age), ")"));
  }
}

}  // namespace

// The one validation pass. A section's rules run only when the section is in
// the file (absent sections keep Settings' defaults).
Settings Validate(const pb::FleetConfig& config, const std::set<std::string>& reported,
                  Errors* errors, const ValidateOptions& options) {
  using F = pb::FleetConfig;
  Settings s;
  const Fields top(config, "", 0, errors, reported);
  auto section = [&](int number, const Message& message) {
    return Fields(message, top.PathOf(number), top.RankOf(number), errors, reported);
  };
  top.String(F::kModelFieldNumber, &s.model);
  if (config.has_listen())
    ValidateListen(section(F::kListenFieldNumber, config.listen()), &s.listen);
  ValidateEngines(config, top, &s.engines);
  if (config.has_engine_contract()) {
    ValidateEngineContract(section(F::kEngineContractFieldNumber, config.engine_contract()),
                           &s.engine_contract.emplace());
  }
  bool request_ok = true;
  if (config.has_serving()) {
    request_ok = ValidateServing(section(F::kServingFieldNumber, config.serving()),
                                 config.serving(), options.read_tls_files, &s.serving);
  }
  if (config.has_admin()) ValidateAdmin(section(F::kAdminFieldNumber, config.admin()), &s.admin);
  if (config.has_engine()) {
    ValidateEngineIo(section(F::kEngineFieldNumber, config.engine()), config.engine(),
                     request_ok ? std::optional<double>(s.serving.request_timeout_s) : std::nullopt,
                     options.read_tls_files, &s.engine);
  }
  if (config.has_recovery()) {
    ValidateRecovery(section(F::kRecoveryFieldNumber, config.recovery()), &s.recovery);
  }
  if (config.has_limits()) {
    ValidateLimits(section(F::kLimitsFieldNumber, config.limits()), &s.limits);
  }
  if (config.has_tls()) {
    ValidateTls(section(F::kTlsFieldNumber, config.tls()), options.read_tls_files, &s.tls);
  }
  if (config.has_links()) {
    ValidateLinks(section(F::kLinksFieldNumber, config.links()), &s.links);
  }
  bool lease_ok = true;
  if (config.has_handoff()) {
    lease_ok = ValidateHandoff(section(F::kHandoffFieldNumber, config.handoff()), &s.handoff);
  }
  if (config.has_placement()) {
    ValidatePlacement(section(F::kPlacementFieldNumber, config.placement()), &s.placement);
  }
  if (config.has_discovery()) {
    ValidateDiscovery(section(F::kDiscoveryFieldNumber, config.discovery()), config.discovery(),
                      &s.discovery);
  }
  if (config.has_membership()) {
    ValidateMembership(section(F::kMembershipFieldNumber, config.membership()), &s.membership);
  }
  if (config.has_kv_events()) {
    ValidateKvEvents(section(F::kKvEventsFieldNumber, config.kv_events()), &s.kv_events);
  }
  if (config.has_continuation()) {
    ValidateContinuation(section(F::kContinuationFieldNumber, config.continuation()),
                         &s.continuation);
  }
  if (config.has_tracing()) {
    ValidateTracing(section(F::kTracingFieldNumber, config.tracing()), &s.tracing);
  }
  if (request_ok && lease_ok) {
    const std::optional<Fields> serving =
        config.has_serving()
            ? std::optional<Fields>(section(F::kServingFieldNumber, config.serving()))
            : std::nullopt;
    ApplyHandoffAge(serving ? &*serving : nullptr, &s);
  }
  return s;
}

}  // namespace narwhal::server::config_file
