#include "engines/sim/sim_args.h"

#include <map>

#include "gtest/gtest.h"

namespace narwhal::sim {
namespace {

absl::StatusOr<SimArgs> Parse(std::vector<std::string> args) {
  const std::map<std::string, std::string> env = {{"SIM_KEY", "s3cret"},
                                                  {"EMPTY", ""}};
  return ParseSimArgs(args, [&env](const std::string& name, std::string* value) {
    auto it = env.find(name);
    if (it == env.end()) return false;
    *value = it->second;
    return true;
  });
}

TEST(SimArgsTest, ParsesEveryFlag) {
  absl::StatusOr<SimArgs> args = Parse(
      {"--port", "0", "--host=0.0.0.0", "--engine-id", "p0", "--model", "M",
       "--role", "prefill", "--prefill-ms-per-1k-tokens", "2.5",
       "--token-interval-ms=1", "--kv-transfer-ms", "3", "--kv-lease-s", "0.5",
       "--max-silence-s", "9", "--threads", "64", "--vllm-version", "0.30.0",
       "--max-model-len", "4096", "--fingerprint", "fp",
       "--kv-load-failure-policy", "recompute", "--api-key-env", "SIM_KEY",
       "--exit-on-stdin-eof"});
  ASSERT_TRUE(args.ok()) << args.status();
  const SimOptions& o = args->options;
  EXPECT_EQ(o.port, 0);
  EXPECT_EQ(o.host, "0.0.0.0");
  EXPECT_EQ(o.engine_id, "p0");
  EXPECT_EQ(o.model, "M");
  EXPECT_EQ(o.role, SimRole::kPrefill);
  EXPECT_DOUBLE_EQ(o.prefill_ms_per_1k_tokens, 2.5);
  EXPECT_DOUBLE_EQ(o.token_interval_ms, 1);
  EXPECT_DOUBLE_EQ(o.kv_transfer_ms, 3);
  EXPECT_DOUBLE_EQ(o.kv_lease_s, 0.5);
  EXPECT_DOUBLE_EQ(o.max_silence_s, 9);
  EXPECT_EQ(o.threads, 64);
  EXPECT_EQ(o.vllm_version, "0.30.0");
  EXPECT_EQ(o.max_model_len, 4096);
  EXPECT_EQ(o.system_fingerprint, "fp");
  EXPECT_EQ(o.kv_load_failure_policy, KvLoadFailurePolicy::kRecompute);
  EXPECT_EQ(o.api_key, "s3cret");
  EXPECT_TRUE(args->exit_on_stdin_eof);
}

TEST(SimArgsTest, Defaults) {
  absl::StatusOr<SimArgs> args = Parse({"--port", "8000", "--engine-id", "d0"});
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_EQ(args->options.host, "127.0.0.1");
  EXPECT_EQ(args->options.vllm_version, "0.29.1");
  EXPECT_EQ(args->options.max_model_len, 32768);
  EXPECT_DOUBLE_EQ(args->options.kv_lease_s, 30);
  EXPECT_DOUBLE_EQ(args->options.max_silence_s, 300);
  EXPECT_EQ(args->options.threads, 512);
  EXPECT_EQ(args->options.kv_load_failure_policy, KvLoadFailurePolicy::kFail);
  EXPECT_TRUE(args->options.api_key.empty());
  EXPECT_FALSE(args->exit_on_stdin_eof);
}

TEST(SimArgsTest, Errors) {
  auto error = [](std::vector<std::string> args) {
    absl::StatusOr<SimArgs> parsed = Parse(std::move(args));
    return parsed.ok() ? std::string("ok") : std::string(parsed.status().message());
  };
  EXPECT_EQ(error({"--engine-id", "x"}), "--port: required");
  EXPECT_EQ(error({"--port", "0"}), "--engine-id: required");
  EXPECT_EQ(error({"--port", "70000", "--engine-id", "x"}),
            "--port: must be an integer 0..65535, got \"70000\"");
  EXPECT_EQ(error({"--port", "0", "--engine-id", "x", "--role", "judge"}),
            "--role: must be prefill, decode or both");
  EXPECT_EQ(error({"--port", "0", "--engine-id", "x", "--kv-lease-s", "-1"}),
            "--kv-lease-s: must be a number >= 0, got \"-1\"");
  EXPECT_EQ(error({"--port", "0", "--engine-id", "x", "--frob", "1"}),
            "unknown flag \"--frob\"");
  EXPECT_EQ(error({"--port", "0", "--engine-id"}), "--engine-id: missing value");
  EXPECT_EQ(error({"--port", "0", "--engine-id", "x", "--api-key-env", "NOPE"}),
            "--api-key-env: environment variable \"NOPE\" is not set or empty");
  EXPECT_EQ(error({"--port", "0", "--engine-id", "x", "--api-key-env", "EMPTY"}),
            "--api-key-env: environment variable \"EMPTY\" is not set or empty");
  EXPECT_EQ(error({"stray"}), "unexpected argument \"stray\"");
}

TEST(SimArgsTest, FingerprintDefault) {
  SimOptions options;
  options.engine_id = "p0";
  const std::string fingerprint = EffectiveFingerprint(options);
  EXPECT_EQ(fingerprint.rfind("vllm-0.29.1-", 0), 0u);
  EXPECT_EQ(fingerprint.size(), std::string("vllm-0.29.1-").size() + 8);
  options.engine_id = "p1";
  EXPECT_NE(EffectiveFingerprint(options), fingerprint);
  options.system_fingerprint = "custom";
  EXPECT_EQ(EffectiveFingerprint(options), "custom");
}

}  // namespace
}  // namespace narwhal::sim
