#include "engines/sim/sim_args.h"

#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace narwhal::sim {
namespace {

absl::Status Bad(absl::string_view flag, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(flag, ": ", what));
}

absl::Status ReadInt(absl::string_view flag, const std::string& text, int lo, int hi, int* out) {
  int value = 0;
  if (!absl::SimpleAtoi(text, &value) || value < lo || value > hi) {
    return Bad(flag, absl::StrCat("must be an integer ", lo, "..", hi, ", got \"", text, "\""));
  }
  *out = value;
  return absl::OkStatus();
}

absl::Status ReadNonNegative(absl::string_view flag, const std::string& text, double* out) {
  double value = 0;
  if (!absl::SimpleAtod(text, &value) || !std::isfinite(value) || value < 0) {
    return Bad(flag, absl::StrCat("must be a number >= 0, got \"", text, "\""));
  }
  *out = value;
  return absl::OkStatus();
}

}  // namespace

const char* SimUsage() {
  return "usage: narwhal-sim --port N --engine-id ID [flags]\n"
         "  --port N                        listen port, 0 picks one (required)\n"
         "  --engine-id ID                  engine id in descriptors and logs (required)\n"
         "  --host H                        listen address (default 127.0.0.1)\n"
         "  --model NAME                    served model (default Qwen/Qwen3-0.6B)\n"
         "  --role prefill|decode|both      reported role (default both)\n"
         "  --prefill-ms-per-1k-tokens X    prefill latency per 1000 prompt tokens (default 0)\n"
         "  --token-interval-ms X           time between generated tokens (default 5)\n"
         "  --kv-transfer-ms X              consumer's wait before a KV pull (default 0)\n"
         "  --kv-lease-s X                  how long an unpulled handoff is held (default 30)\n"
         "  --max-silence-s X               bound of every injected silence (default 300)\n"
         "  --threads N                     HTTP worker threads (default 512)\n"
         "  --vllm-version V                reported vLLM version (default 0.29.1)\n"
         "  --max-model-len N               reported max_model_len (default 32768)\n"
         "  --fingerprint S                 system_fingerprint (default vllm-<version>-<hash>)\n"
         "  --kv-load-failure-policy fail|recompute  on a failed KV pull (default fail)\n"
         "  --api-key-env VAR               require this env var's key on /v1/* (default none)\n"
         "  --prefix-cache-blocks N         prefix cache size in 16-token blocks, 0 = off (default "
         "0)\n"
         "  --block-size N                  tokens per prefix-cache block (default 16)\n"
         "  --kv-events-port N              publish KV-cache events on this port, 0 picks one "
         "(default off)\n"
         "  --kv-events-replay-port N       answer replay requests on this port, 0 picks one "
         "(default off)\n"
         "  --kv-events-encoding map|array  events as maps (vLLM >= 0.24) or arrays (<= 0.23) "
         "(default map)\n"
         "  --kv-events-topic T             the events' topic frame (default empty)\n"
         "  --tls-cert-file F               serve HTTPS with this PEM certificate chain\n"
         "  --tls-key-file F                ... and this PEM private key (both or neither)\n"
         "  --tls-client-ca-file F          require client certificates this PEM CA signed\n"
         "  --prefill-lanes N               prefills computed at once, 0 = unlimited (default 0)\n"
         "  --enable-prompt-tokens-details  usage carries prompt_tokens_details.cached_tokens "
         "(default off)\n"
         "  --exit-on-stdin-eof             exit when stdin closes (default off)\n"
         "  --version                       print the version and exit\n"
         "  --help, -h                      print this help and exit\n";
}

absl::StatusOr<SimArgs> ParseSimArgs(const std::vector<std::string>& args, const EnvLookup& env) {
  SimArgs parsed;
  SimOptions& o = parsed.options;
  bool have_port = false;
  bool have_engine_id = false;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string flag = args[i];
    std::string value;
    bool inline_value = false;
    const size_t eq = flag.find('=');
    if (flag.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
      inline_value = true;
    }
    if (flag == "--help" || flag == "-h") {
      parsed.help = true;
      continue;
    }
    if (flag == "--version") {
      parsed.version = true;
      continue;
    }
    if (flag == "--exit-on-stdin-eof") {
      if (inline_value) return Bad(flag, "takes no value");
      parsed.exit_on_stdin_eof = true;
      continue;
    }
    if (flag == "--enable-prompt-tokens-details") {
      if (inline_value) return Bad(flag, "takes no value");
      o.prompt_tokens_details = true;
      continue;
    }
    if (flag.rfind("--", 0) != 0) {
      return absl::InvalidArgumentError(absl::StrCat("unexpected argument \"", flag, "\""));
    }
    if (!inline_value) {
      if (i + 1 >= args.size()) return Bad(flag, "missing value");
      value = args[++i];
    }
    absl::Status status;
    if (flag == "--port") {
      status = ReadInt(flag, value, 0, 65535, &o.port);
      have_port = true;
    } else if (flag == "--host") {
      if (value.empty()) return Bad(flag, "must not be empty");
      o.host = value;
    } else if (flag == "--engine-id") {
      if (value.empty()) return Bad(flag, "must not be empty");
      o.engine_id = value;
      have_engine_id = true;
    } else if (flag == "--model") {
      if (value.empty()) return Bad(flag, "must not be empty");
      o.model = value;
    } else if (flag == "--role") {
      if (value == "prefill") {
        o.role = SimRole::kPrefill;
      } else if (value == "decode") {
        o.role = SimRole::kDecode;
      } else if (value == "both") {
        o.role = SimRole::kBoth;
      } else {
        return Bad(flag, "must be prefill, decode or both");
      }
    } else if (flag == "--prefill-ms-per-1k-tokens") {
      status = ReadNonNegative(flag, value, &o.prefill_ms_per_1k_tokens);
    } else if (flag == "--token-interval-ms") {
      status = ReadNonNegative(flag, value, &o.token_interval_ms);
    } else if (flag == "--kv-transfer-ms") {
      status = ReadNonNegative(flag, value, &o.kv_transfer_ms);
    } else if (flag == "--kv-lease-s") {
      status = ReadNonNegative(flag, value, &o.kv_lease_s);
    } else if (flag == "--max-silence-s") {
      status = ReadNonNegative(flag, value, &o.max_silence_s);
    } else if (flag == "--threads") {
      status = ReadInt(flag, value, 1, 10000, &o.threads);
    } else if (flag == "--prefix-cache-blocks") {
      status = ReadInt(flag, value, 0, 1 << 24, &o.prefix_cache_blocks);
    } else if (flag == "--block-size") {
      status = ReadInt(flag, value, 1, 4096, &o.block_size);
    } else if (flag == "--kv-events-port") {
      status = ReadInt(flag, value, 0, 65535, &o.kv_events_port);
    } else if (flag == "--kv-events-replay-port") {
      status = ReadInt(flag, value, 0, 65535, &o.kv_events_replay_port);
    } else if (flag == "--kv-events-encoding") {
      if (value != "map" && value != "array") return Bad(flag, "must be map or array");
      o.kv_events_map = value == "map";
    } else if (flag == "--kv-events-topic") {
      o.kv_events_topic = value;
    } else if (flag == "--prefill-lanes") {
      status = ReadInt(flag, value, 0, 1024, &o.prefill_lanes);
    } else if (flag == "--vllm-version") {
      if (value.empty()) return Bad(flag, "must not be empty");
      o.vllm_version = value;
    } else if (flag == "--max-model-len") {
      status = ReadInt(flag, value, 1, 1 << 30, &o.max_model_len);
    } else if (flag == "--fingerprint") {
      o.system_fingerprint = value;
    } else if (flag == "--kv-load-failure-policy") {
      if (value == "fail") {
        o.kv_load_failure_policy = KvLoadFailurePolicy::kFail;
      } else if (value == "recompute") {
        o.kv_load_failure_policy = KvLoadFailurePolicy::kRecompute;
      } else {
        return Bad(flag, "must be fail or recompute");
      }
    } else if (flag == "--tls-cert-file" || flag == "--tls-key-file" ||
               flag == "--tls-client-ca-file") {
      if (value.empty()) return Bad(flag, "must not be empty");
      std::string& field = flag == "--tls-cert-file"  ? o.tls_cert_file
                           : flag == "--tls-key-file" ? o.tls_key_file
                                                      : o.tls_client_ca_file;
      field = value;
    } else if (flag == "--api-key-env") {
      std::string key;
      if (value.empty() || !env(value, &key) || key.empty()) {
        return Bad(flag, absl::StrCat("environment variable \"", value, "\" is not set or empty"));
      }
      o.api_key = key;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag \"", flag, "\""));
    }
    if (!status.ok()) return status;
  }
  if (parsed.help || parsed.version) return parsed;
  if (!have_port) return absl::InvalidArgumentError("--port: required");
  if (!have_engine_id) {
    return absl::InvalidArgumentError("--engine-id: required");
  }
  if (o.tls_cert_file.empty() != o.tls_key_file.empty()) {
    return absl::InvalidArgumentError("--tls-cert-file and --tls-key-file: both or neither");
  }
  if (!o.tls_client_ca_file.empty() && o.tls_cert_file.empty()) {
    return absl::InvalidArgumentError("--tls-client-ca-file: requires --tls-cert-file");
  }
  return parsed;
}

}  // namespace narwhal::sim
