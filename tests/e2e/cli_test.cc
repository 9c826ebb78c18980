// Every binary's command line: --version prints the build's version and
// commit (the narwhal_build_info library, from CMake's project version and
// git), and --help lists every flag the binary accepts, each with its
// default.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "version/build_info.h"
#include "tests/fakes/command.h"

namespace narwhal::testing {
namespace {

struct Binary {
  std::string name;
  std::string path;
  // Flags taking a value or not, each of which must be on a --help line
  // that also states its default (or that it is required).
  std::vector<std::string> flags;
};

std::vector<Binary> Binaries() {
  return {
      {"narwhal-serve",
       NARWHAL_SERVE_BINARY,
       {"--config", "--http", "--grpc", "--admin", "--journal", "--preflight", "--log-level",
        "--log-format", "--preflight-wait-s", "--access-log"}},
      {"narwhal-check", NARWHAL_CHECK_BINARY, {"--config", "--json", "--pairs", "--wait-s"}},
      {"narwhal-sim",
       NARWHAL_SIM_BINARY,
       {"--port", "--engine-id", "--host", "--model", "--role", "--prefill-ms-per-1k-tokens",
        "--token-interval-ms", "--kv-transfer-ms", "--kv-lease-s", "--max-silence-s", "--threads",
        "--vllm-version", "--max-model-len", "--fingerprint", "--kv-load-failure-policy",
        "--api-key-env", "--exit-on-stdin-eof"}},
      {"narwhal-bench",
       NARWHAL_BENCH_BINARY,
       {"--mode", "--target", "--prefill", "--decode", "--api", "--concurrency", "--duration-s",
        "--ramp-s", "--max-tokens", "--prompt-words", "--model", "--pid", "--threads",
        "--grpc-channels", "--json"}},
  };
}

TEST(CliTest, VersionPrintsTheProjectVersionAndCommit) {
  for (const Binary& b : Binaries()) {
    const CommandResult r = RunCommand({b.path, "--version"});
    EXPECT_EQ(r.exit_code, 0) << b.name << ": " << r.err;
    EXPECT_EQ(r.out, VersionLine(b.name) + "\n") << b.name;
    EXPECT_NE(r.out.find(std::string(" ") + BuildVersion() + " "), std::string::npos) << r.out;
  }
  EXPECT_STRNE(BuildVersion(), "");
  EXPECT_STRNE(BuildCommit(), "");
}

TEST(CliTest, HelpListsEveryFlagWithItsDefault) {
  for (const Binary& b : Binaries()) {
    const CommandResult r = RunCommand({b.path, "--help"});
    EXPECT_EQ(r.exit_code, 0) << b.name << ": " << r.err;
    std::vector<std::string> lines = absl::StrSplit(r.out, '\n');
    std::vector<std::string> all = b.flags;
    all.push_back("--version");
    all.push_back("--help");
    for (const std::string& flag : all) {
      bool described = false;
      for (size_t i = 0; i < lines.size() && !described; ++i) {
        // A flag's own line: "  --flag ..." (its description may wrap once).
        if (lines[i].rfind("  " + flag + " ", 0) != 0 && lines[i].rfind("  " + flag + ",", 0) != 0)
          continue;
        std::string text = lines[i];
        if (i + 1 < lines.size() && lines[i + 1].rfind("      ", 0) == 0) text += lines[i + 1];
        described = flag == "--version" || flag == "--help" ||
                    text.find("(default") != std::string::npos ||
                    text.find("(required)") != std::string::npos;
      }
      EXPECT_TRUE(described) << b.name << " --help does not describe " << flag
                             << " with its default:\n"
                             << r.out;
    }
  }
}

}  // namespace
}  // namespace narwhal::testing
