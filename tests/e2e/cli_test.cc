// Every binary's command line: --version prints the build's version and
// commit (the narwhal_build_info library, from CMake's project version and
// git), and --help lists every flag the binary accepts, each with its
// default. And narwhal-check's checks of a fleet file before a live reload
// (SPEC §13): --validate-only, and --diff against a running narwhal-serve.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tests/fakes/command.h"
#include "tests/fakes/serve_process.h"
#include "version/build_info.h"

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
      {"narwhal-check",
       NARWHAL_CHECK_BINARY,
       {"--config", "--json", "--pairs", "--wait-s", "--validate-only", "--diff", "--admin",
        "--token-env"}},
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

// ---------------------------------------------------------------------------
// narwhal-check --validate-only and --diff.

using json = nlohmann::json;

class CheckConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto dir = MakeScratchDir("check_config_");
    ASSERT_TRUE(dir.ok()) << dir.status();
    dir_ = *dir;
  }
  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  // Writes `config` to <dir>/<name> and returns the path.
  std::string Write(const std::string& name, const json& config) const {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path, std::ios::trunc) << config.dump(2);
    return path;
  }

  static CommandResult Check(std::vector<std::string> args,
                             const std::map<std::string, std::string>& env = {}) {
    args.insert(args.begin(), NARWHAL_CHECK_BINARY);
    return RunCommand(args, absl::Seconds(60), env);
  }

  std::string dir_;
};

// Engines nothing listens on: narwhal-serve starts (and ejects them), and a
// check that contacted one would fail.
json Fleet() {
  return {{"model", "m"},
          {"listen", {{"http", "127.0.0.1:0"}, {"grpc", "127.0.0.1:0"}, {"admin", "127.0.0.1:0"}}},
          {"engines",
           {{{"iid", "p0"}, {"url", "http://127.0.0.1:1"}, {"role", "prefill"}},
            {{"iid", "p1"}, {"url", "http://127.0.0.1:2"}, {"role", "prefill"}},
            {{"iid", "d0"}, {"url", "http://127.0.0.1:3"}, {"role", "decode"}},
            {{"iid", "d1"}, {"url", "http://127.0.0.1:4"}, {"role", "decode"}}}}};
}

TEST_F(CheckConfigTest, ValidateOnlyContactsNoEngine) {
  // An engine that would see any connection.
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof addr;
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(listener, 16), 0);
  ASSERT_EQ(::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &length), 0);
  json config = Fleet();
  for (json& engine : config["engines"]) {
    engine["url"] = "http://127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
    break;
  }
  const std::string path = Write("fleet.json", config);
  const CommandResult r = Check({"--config", path, "--validate-only"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "narwhal-check: config " + path + " is valid\n");
  EXPECT_EQ(r.err, "");
  EXPECT_LT(::accept(listener, nullptr, nullptr), 0) << "an engine was contacted";
  ::close(listener);
}

TEST_F(CheckConfigTest, ValidateOnlyNamesTheKeyPath) {
  json config = Fleet();
  config["serving"]["max_attempts"] = 7;
  config["engines"][1]["url"] = "http://localhost:1";
  const std::string path = Write("fleet.json", config);
  const CommandResult r = Check({"--config", path, "--validate-only"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "narwhal-check: config " + path +
                       ": engines[1].url \"http://localhost:1\" is a duplicate of engines[0].url "
                       "\"http://127.0.0.1:1\" (the same host and port; \"p1\" and \"p0\" are "
                       "one engine); serving.max_attempts must be between 1 and 3 (got 7)\n");
}

TEST_F(CheckConfigTest, ValidateOnlyRefusesAFifoWithoutBlocking) {
  const std::string fifo = dir_ + "/fleet.json";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const CommandResult r = Check({"--config", fifo, "--validate-only"});
  EXPECT_EQ(r.exit_code, 1) << "killed after blocking?";
  EXPECT_EQ(r.err,
            "narwhal-check: config " + fifo + ": cannot read: not a regular file (a FIFO)\n");
}

TEST_F(CheckConfigTest, FlagsThatDoNotGoTogetherAreBadArguments) {
  const std::string path = Write("fleet.json", Fleet());
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"--config", path, "--validate-only", "--diff", "--admin", "127.0.0.1:1"},
           {"--config", path, "--diff"},
           {"--config", path, "--admin", "127.0.0.1:1"},
           {"--config", path, "--token-env", "T"},
           {"--config", path, "--validate-only", "--json"},
           {"--config", path, "--validate-only", "--wait-s", "1"},
           {"--config", path, "--diff", "--admin", "127.0.0.1:1", "--pairs", "ring"}}) {
    const CommandResult r = Check(args);
    EXPECT_EQ(r.exit_code, 2) << absl::StrJoin(args, " ") << "\n" << r.err;
  }
}

TEST_F(CheckConfigTest, DiffShowsWhatAReloadWouldChange) {
  json running = Fleet();
  running["admin"]["token_env"] = "NARWHAL_CHECK_TEST_TOKEN";
  ServeOptions options;
  options.config = running;
  options.journal = false;
  options.loopback_listeners = false;
  options.env = {{"NARWHAL_CHECK_TEST_TOKEN", "s3cret"}};
  auto serve = ServeProcess::Start(options);
  ASSERT_TRUE(serve.ok()) << serve.status();
  const std::string admin = (*serve)->admin_address();
  const std::map<std::string, std::string> token = {{"NARWHAL_CHECK_TEST_TOKEN", "s3cret"}};

  // The running file itself: nothing changes.
  const std::string same = Write("same.json", running);
  CommandResult r = Check({"--config", same, "--diff", "--admin", admin}, token);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "no change\n");

  // Engines by iid, keys by path.
  json candidate = running;
  candidate["engines"].erase(2);                          // d0 leaves
  candidate["engines"][0]["url"] = "http://127.0.0.1:5";  // p0 moves
  candidate["engines"].push_back(
      {{"iid", "p2"}, {"url", "http://127.0.0.1:6"}, {"role", "prefill"}});  // p2 joins
  candidate["serving"]["max_attempts"] = 2;
  candidate["recovery"]["eject_after"] = 5;
  const std::string changed = Write("changed.json", candidate);
  r = Check({"--config", changed, "--diff", "--admin", admin}, token);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out,
            "engines joined p2; left d0; changed p0 (url); keys changed serving.max_attempts, "
            "recovery.eject_after\n"
            "key changed: serving.max_attempts\n"
            "key changed: recovery.eject_after\n"
            "engine joins: p2\n"
            "engine leaves: d0\n"
            "engine changes (leaves and joins): p0 (url)\n");

  r = Check({"--config", changed, "--diff", "--admin", admin, "--json"}, token);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out), json::parse(R"({
      "needs_restart": [], "keys_changed": ["serving.max_attempts", "recovery.eject_after"],
      "engines": {"joined": ["p2"], "left": ["d0"], "changed": [{"iid": "p0", "fields": ["url"]}],
                  "unchanged": ["p1", "d1"]}})"))
      << r.out;

  // A key that needs a restart: exit 1, named.
  candidate["model"] = "other";
  candidate["serving"]["io_threads"] = 3;
  const std::string restart = Write("restart.json", candidate);
  r = Check({"--config", restart, "--diff", "--admin", admin}, token);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(absl::StartsWith(r.out, "needs a restart: model, serving.io_threads; engines "))
      << r.out;
  EXPECT_EQ(r.err, "narwhal-check: a reload with " + restart +
                       " would be refused: needs a restart: model, serving.io_threads\n");

  // The token, from the file's admin.token_env or --token-env.
  r = Check({"--config", same, "--diff", "--admin", admin});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(r.err, "GetConfig: UNAUTHENTICATED")) << r.err;
  r = Check({"--config", same, "--diff", "--admin", admin, "--token-env", "OTHER_VAR"},
            {{"OTHER_VAR", "s3cret"}});
  EXPECT_EQ(r.exit_code, 0) << r.err;

  // An invalid candidate is refused before the router is asked.
  candidate = running;
  candidate["serving"]["max_attempts"] = 9;
  r = Check({"--config", Write("invalid.json", candidate), "--diff", "--admin", admin}, token);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(r.err, "serving.max_attempts must be between 1 and 3")) << r.err;
}

TEST_F(CheckConfigTest, DiffWithNoRouterFailsWithinItsDeadline) {
  // A port nothing listens on.
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof addr;
  ASSERT_EQ(::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::getsockname(s, reinterpret_cast<sockaddr*>(&addr), &length), 0);
  const std::string admin = "127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  ::close(s);
  const CommandResult r =
      Check({"--config", Write("fleet.json", Fleet()), "--diff", "--admin", admin});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(r.err, "narwhal-check: admin " + admin + ": GetConfig: ")) << r.err;
}

}  // namespace
}  // namespace narwhal::testing
