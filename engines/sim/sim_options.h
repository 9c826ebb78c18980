// Settings of one simulated vLLM engine (narwhal-sim).
//
// A SimOptions value fully describes an engine: several SimEngines with
// different options can run in one process (the router's embedded default
// starts four). Durations are plain numbers whose unit is in the name, the
// same names the narwhal-sim command line uses.
#ifndef NARWHAL_ENGINES_SIM_SIM_OPTIONS_H_
#define NARWHAL_ENGINES_SIM_SIM_OPTIONS_H_

#include <string>

#include "absl/strings/string_view.h"

namespace narwhal::sim {

// Informational only: reported by GET /sim/info. A simulated engine serves
// both legs whatever its role, as a vLLM engine with kv_role "kv_both" does.
enum class SimRole { kPrefill, kDecode, kBoth };

// What a consumer does when pulling a handoff fails (vLLM's
// kv_load_failure_policy): kFail ends the request with an internal error,
// kRecompute computes the prompt locally.
enum class KvLoadFailurePolicy { kFail, kRecompute };

struct SimOptions {
  // Address to listen on. Also advertised as remote_host in handoff
  // descriptors (a wildcard address is advertised as 127.0.0.1).
  std::string host = "127.0.0.1";
  // 0 picks a free port; SimEngine::port() reports the actual one.
  int port = 0;
  std::string engine_id = "sim";
  // The served model name (GET /v1/models; requests naming another model
  // get 404).
  std::string model = "Qwen/Qwen3-0.6B";
  SimRole role = SimRole::kBoth;
  std::string vllm_version = "0.29.1";
  int max_model_len = 32768;
  // Empty means vllm-<version>-<8 hex digits of a hash of engine_id>.
  std::string system_fingerprint;

  // Prefill latency: prefill_ms_per_1k_tokens * prompt_tokens / 1000 ms
  // before the first token of a locally computed prompt.
  double prefill_ms_per_1k_tokens = 0;
  // Time between generated tokens.
  double token_interval_ms = 5;
  // Time a consumer waits before pulling a handoff (replaces the prefill
  // latency when the pull succeeds).
  double kv_transfer_ms = 0;
  // How long a producer holds a handoff nobody pulls.
  double kv_lease_s = 30;
  // Upper bound of every injected silence.
  double max_silence_s = 300;

  // HTTP worker threads; each open connection (and each stream) holds one.
  int threads = 512;
  KvLoadFailurePolicy kv_load_failure_policy = KvLoadFailurePolicy::kFail;
  // Prefix cache (engines/sim/prefix_cache.h): blocks of 16 tokens kept,
  // least recently used evicted; 0 = off. When on, a locally computed
  // prompt's prefill latency counts only its uncached tokens and usage
  // carries prompt_tokens_details.cached_tokens.
  int prefix_cache_blocks = 0;
  // Usage carries prompt_tokens_details.cached_tokens (vLLM's
  // --enable-prompt-tokens-details); also on whenever the prefix cache is.
  // A consumer that pulled its handoff reports the pulled prompt tokens but
  // the last one (vLLM recomputes it), one that recomputed the prompt only
  // what its prefix cache held.
  bool prompt_tokens_details = false;
  // Prefills computed at once (engines/sim/prefill_lanes.h); 0 = unlimited.
  // With N, a prefill waits for one of N lanes, so prefill latency queues.
  int prefill_lanes = 0;
  // When non-empty, /v1/* requires "Authorization: Bearer <api_key>".
  std::string api_key;
  // HTTPS instead of HTTP: the PEM certificate chain and key served (both or
  // neither), and a PEM CA bundle that, when set, makes every client present
  // a certificate it signed (mTLS).
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_client_ca_file;
  // Tokens per prefix-cache block (vLLM's --block-size).
  int block_size = 16;
  // KV-cache events (engines/sim/kv_event_publisher.h): the PUB's port (0
  // picks a free one; -1: no events), the replay ROUTER's (-1: none), the
  // events' form (maps as vLLM >= 0.24, or arrays as <= 0.23) and topic.
  int kv_events_port = -1;
  int kv_events_replay_port = -1;
  bool kv_events_map = true;
  std::string kv_events_topic;
};

// "prefill", "decode" or "both".
absl::string_view RoleName(SimRole role);
// "fail" or "recompute".
absl::string_view PolicyName(KvLoadFailurePolicy policy);

// The fingerprint an engine reports: options.system_fingerprint when set,
// else vllm-<vllm_version>-<8 lowercase hex digits of FNV-1a(engine_id)>.
std::string EffectiveFingerprint(const SimOptions& options);

// The host written into descriptors as remote_host.
std::string AdvertisedHost(const SimOptions& options);

}  // namespace narwhal::sim

#endif  // NARWHAL_ENGINES_SIM_SIM_OPTIONS_H_
