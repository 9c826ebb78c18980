// End-to-end preflight (B18): the real narwhal-check binary against real
// narwhal-sim engines, plus its command-line contract (SPEC §2: exit 0 when
// every gate passes, 1 when one fails or the config is invalid, 2 on bad
// arguments).
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/fakes/sim_process.h"

namespace narwhal {
namespace {

using json = nlohmann::json;
using ::narwhal::testing::SimProcess;
using ::testing::HasSubstr;
using ::testing::StartsWith;

struct CheckRun {
  int exit_code = -1;  // -1: did not exit normally
  std::string out;
  std::string err;
  double seconds = 0;
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class PreflightE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/narwhal-preflight-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    for (const char* name : {"fleet.json", "out", "err"}) std::remove((dir_ + "/" + name).c_str());
    rmdir(dir_.c_str());
  }

  // Starts a sim (its iid is the engine id) and adds it to the config; null
  // (and a test failure) when it does not start.
  SimProcess* Sim(const std::string& iid, const std::string& role,
                  const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {"--engine-id", iid, "--role", role};
    args.insert(args.end(), {"--token-interval-ms", "1"});
    args.insert(args.end(), extra.begin(), extra.end());
    auto sim = SimProcess::Start(args);
    if (!sim.ok()) {
      ADD_FAILURE() << "narwhal-sim " << iid << ": " << sim.status();
      return nullptr;
    }
    engines_.push_back({{"iid", iid}, {"url", (*sim)->url()}, {"role", role}});
    SimProcess* raw = sim->get();
    sims_[iid] = std::move(*sim);
    return raw;
  }

  // A fleet config over the engines started so far, with short budgets.
  json Config() const {
    return {{"model", "Qwen/Qwen3-0.6B"},
            {"engines", engines_},
            {"engine_contract", {{"vllm_version", "0.29.1"}}},
            {"serving", {{"request_timeout_s", 10}, {"prefill_timeout_s", 5}}},
            {"engine",
             {{"first_token_timeout_s", 0.5},
              {"health_timeout_s", 1},
              {"connect_timeout_s", 1},
              {"decode_read_timeout_s", 2}}}};
  }

  std::string WriteText(const std::string& text) {
    const std::string path = dir_ + "/fleet.json";
    std::ofstream(path) << text;
    return path;
  }
  std::string WriteConfig(const json& config) { return WriteText(config.dump(2)); }

  // Runs narwhal-check with `args` (at most 60 s).
  CheckRun RunCheck(const std::vector<std::string>& args) {
    const std::string out_path = dir_ + "/out", err_path = dir_ + "/err";
    const auto started = std::chrono::steady_clock::now();
    const pid_t pid = fork();
    if (pid == 0) {
      const int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      const int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      const int in = open("/dev/null", O_RDONLY);
      if (out < 0 || err < 0 || in < 0) _exit(127);
      dup2(in, 0);
      dup2(out, 1);
      dup2(err, 2);
      std::vector<char*> argv;
      std::string binary = NARWHAL_CHECK_BINARY;
      argv.push_back(binary.data());
      std::vector<std::string> copy = args;
      for (std::string& a : copy) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(binary.c_str(), argv.data());
      _exit(127);
    }
    CheckRun run;
    if (pid < 0) {
      ADD_FAILURE() << "fork failed";
      return run;
    }
    int status = 0;
    while (waitpid(pid, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() - started > std::chrono::seconds(60)) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        ADD_FAILURE() << "narwhal-check ran for more than 60 s";
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    if (WIFEXITED(status)) run.exit_code = WEXITSTATUS(status);
    run.out = ReadFile(out_path);
    run.err = ReadFile(err_path);
    return run;
  }

  // Runs narwhal-check --json on the current config and parses the report.
  json Report(int want_exit, const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {"--config", WriteConfig(Config()), "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    const CheckRun run = RunCheck(args);
    EXPECT_EQ(run.exit_code, want_exit) << run.out << run.err;
    json report = json::parse(run.out, nullptr, false);
    EXPECT_TRUE(report.is_object()) << "stdout is not one JSON document:\n" << run.out;
    if (!report.is_object()) return json::object();
    EXPECT_EQ(report["passed"], want_exit == 0);
    return report;
  }

  static json Gate(const json& report, const std::string& name) {
    for (const json& g : report["gates"]) {
      if (g["name"] == name) return g;
    }
    ADD_FAILURE() << "no gate " << name;
    return json::object();
  }
  static json Check(const json& report, const std::string& gate, const std::string& iid) {
    for (const json& c : report["checks"]) {
      if (c["gate"] == gate && c["iid"] == iid) return c;
    }
    ADD_FAILURE() << "no " << gate << " check for " << iid;
    return json::object();
  }
  static json Transfer(const json& report, const std::string& producer,
                       const std::string& consumer) {
    for (const json& t : report["transfers"]) {
      if (t["producer"] == producer && t["consumer"] == consumer) return t;
    }
    ADD_FAILURE() << "no transfer " << producer << " -> " << consumer;
    return json::object();
  }

  // Handoffs a producer has issued (held, consumed, released or expired).
  static int Handoffs(SimProcess& sim) {
    auto kv = sim.Kv();
    if (!kv.ok()) {
      ADD_FAILURE() << kv.status();
      return -1;
    }
    return static_cast<int>((*kv)["held"].size() + (*kv)["consumed"].size() +
                            (*kv)["released"].size() + (*kv)["expired"].size());
  }

  std::string dir_;
  json engines_ = json::array();
  std::map<std::string, std::unique_ptr<SimProcess>> sims_;
};

// A loopback port nothing listens on.
int ClosedPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

TEST_F(PreflightE2eTest, B18_PreflightPassesOnHealthyFleet) {
  ASSERT_NE(Sim("p0", "prefill"), nullptr);
  ASSERT_NE(Sim("p1", "prefill"), nullptr);
  ASSERT_NE(Sim("d0", "decode"), nullptr);
  ASSERT_NE(Sim("d1", "decode"), nullptr);

  const json mesh = Report(0);
  ASSERT_TRUE(mesh.is_object());
  EXPECT_EQ(mesh["pairs"], "mesh");
  ASSERT_EQ(mesh["gates"].size(), 5u);
  const std::vector<std::string> order = {"reach", "contract", "model", "produce", "consume"};
  for (size_t i = 0; i < order.size(); ++i) {
    EXPECT_EQ(mesh["gates"][i]["name"], order[i]);
    EXPECT_EQ(mesh["gates"][i]["outcome"], "passed") << mesh["gates"][i].dump();
  }
  ASSERT_EQ(mesh["transfers"].size(), 4u);
  for (const json& t : mesh["transfers"]) {
    EXPECT_EQ(t["outcome"], "passed") << t.dump();
    EXPECT_GT(t["first_token_s"].get<double>(), 0) << t.dump();
    EXPECT_LT(t["first_token_s"].get<double>(), 0.5) << t.dump();
    EXPECT_GT(t["prefill_s"].get<double>(), 0) << t.dump();
  }
  std::cout << "preflight of 2 prefill + 2 decode sims (mesh): " << mesh["duration_s"] << " s\n";
  ::testing::Test::RecordProperty("mesh_duration_s", mesh["duration_s"].dump());

  // The consumers really pulled the pairs' handoffs: each producer's store
  // shows one handoff consumed by each decode engine.
  for (const char* producer : {"p0", "p1"}) {
    auto kv = sims_[producer]->Kv();
    ASSERT_TRUE(kv.ok()) << kv.status();
    std::multiset<std::string> consumers;
    for (const json& e : (*kv)["consumed"]) consumers.insert(e["consumer"]["engine_id"]);
    EXPECT_EQ(consumers, (std::multiset<std::string>{"d0", "d1"})) << kv->dump();
  }

  const json ring = Report(0, {"--pairs", "ring"});
  ASSERT_TRUE(ring.is_object());
  EXPECT_EQ(ring["pairs"], "ring");
  ASSERT_EQ(ring["transfers"].size(), 2u);
  EXPECT_EQ(Transfer(ring, "p0", "d0")["outcome"], "passed");
  EXPECT_EQ(Transfer(ring, "p1", "d1")["outcome"], "passed");
  std::cout << "preflight of 2 prefill + 2 decode sims (ring): " << ring["duration_s"] << " s\n";

  // The default output is the table.
  const CheckRun table = RunCheck({"--config", dir_ + "/fleet.json"});
  EXPECT_EQ(table.exit_code, 0) << table.err;
  EXPECT_THAT(table.out, StartsWith("preflight PASSED in "));
  EXPECT_THAT(table.out, HasSubstr("\nconsume   PASS"));
  EXPECT_THAT(table.out, HasSubstr("\np1        d1        PASS"));
  EXPECT_EQ(table.err, "");
  std::cout << table.out;
}

TEST_F(PreflightE2eTest, B18_ContractMismatchFailsContractGate) {
  SimProcess* p0 = Sim("p0", "prefill");
  ASSERT_NE(p0, nullptr);
  SimProcess* d0 = Sim("d0", "decode", {"--vllm-version", "0.0.1"});
  ASSERT_NE(d0, nullptr);
  const json report = Report(1);
  ASSERT_TRUE(report.is_object());
  const json contract = Gate(report, "contract");
  EXPECT_EQ(contract["outcome"], "failed");
  EXPECT_EQ(contract["detail"], "d0: vllm_version is 0.0.1, pinned 0.29.1");
  EXPECT_EQ(Check(report, "contract", "p0")["outcome"], "passed");
  EXPECT_EQ(Gate(report, "reach")["outcome"], "passed");
  EXPECT_EQ(Gate(report, "model")["outcome"], "passed");
  for (const char* name : {"produce", "consume"}) {
    EXPECT_EQ(Gate(report, name)["outcome"], "skipped") << name;
  }
  EXPECT_EQ(Transfer(report, "p0", "d0")["outcome"], "skipped");
  // The producer was never asked for a handoff.
  EXPECT_EQ(Handoffs(*p0), 0);
  EXPECT_EQ(Handoffs(*d0), 0);
}

TEST_F(PreflightE2eTest, B18_ConsumerWithoutFirstTokenIsUnconfirmedTransfer) {
  ASSERT_NE(Sim("p0", "prefill"), nullptr);
  ASSERT_NE(Sim("p1", "prefill"), nullptr);
  ASSERT_NE(Sim("d0", "decode"), nullptr);
  SimProcess* d1 = Sim("d1", "decode");
  ASSERT_NE(d1, nullptr);
  ASSERT_TRUE(d1->SetFaults(json::parse(
                                R"({"faults":[{"kind":"silent_before_first_token",
                                              "phase":"decode","times":-1}]})"))
                  .ok());
  const json report = Report(1);
  ASSERT_TRUE(report.is_object());
  for (const char* name : {"reach", "contract", "model", "produce"}) {
    EXPECT_EQ(Gate(report, name)["outcome"], "passed") << name;
  }
  const json consume = Gate(report, "consume");
  EXPECT_EQ(consume["outcome"], "failed");
  EXPECT_THAT(consume["detail"].get<std::string>(),
              StartsWith("p0 -> d1: unconfirmed_transfer: no first token within 0.5s"));
  for (const char* producer : {"p0", "p1"}) {
    const json bad = Transfer(report, producer, "d1");
    EXPECT_EQ(bad["outcome"], "unconfirmed_transfer") << bad.dump();
    EXPECT_THAT(bad["detail"].get<std::string>(), StartsWith("no first token within 0.5s"));
    EXPECT_EQ(bad["first_token_s"], 0);
    // Bounded by the first-token budget, not the request timeout.
    EXPECT_GE(bad["duration_s"].get<double>(), 0.5);
    EXPECT_LT(bad["duration_s"].get<double>(), 2.0);
    EXPECT_EQ(Transfer(report, producer, "d0")["outcome"], "passed");
  }
}

TEST_F(PreflightE2eTest, B18_UnreachableEngineFailsReach) {
  ASSERT_NE(Sim("p0", "prefill"), nullptr);
  ASSERT_NE(Sim("d0", "decode"), nullptr);
  engines_.push_back({{"iid", "d1"},
                      {"url", "http://127.0.0.1:" + std::to_string(ClosedPort())},
                      {"role", "decode"}});
  const json report = Report(1);
  ASSERT_TRUE(report.is_object());
  const json reach = Gate(report, "reach");
  EXPECT_EQ(reach["outcome"], "failed");
  EXPECT_THAT(reach["detail"].get<std::string>(), StartsWith("d1: GET /health: "));
  EXPECT_EQ(Check(report, "reach", "d1")["outcome"], "failed");
  EXPECT_EQ(Check(report, "reach", "p0")["outcome"], "passed");
  EXPECT_EQ(Check(report, "model", "d1")["outcome"], "skipped");
  EXPECT_EQ(Transfer(report, "p0", "d1")["outcome"], "skipped");
  EXPECT_EQ(Transfer(report, "p0", "d0")["outcome"], "passed");
  EXPECT_EQ(Gate(report, "consume")["outcome"], "passed");
}

TEST_F(PreflightE2eTest, B18_WrongModelFailsModelGate) {
  ASSERT_NE(Sim("p0", "prefill"), nullptr);
  ASSERT_NE(Sim("d0", "decode", {"--model", "other/model"}), nullptr);
  ASSERT_NE(Sim("d1", "decode"), nullptr);
  json config = Config();
  config.erase("engine_contract");  // the contract would already name the model
  const CheckRun run = RunCheck({"--config", WriteConfig(config), "--json"});
  EXPECT_EQ(run.exit_code, 1) << run.err;
  const json report = json::parse(run.out, nullptr, false);
  ASSERT_TRUE(report.is_object()) << run.out;
  EXPECT_EQ(Gate(report, "contract")["outcome"], "passed");
  const json model = Gate(report, "model");
  EXPECT_EQ(model["outcome"], "failed");
  EXPECT_EQ(model["detail"],
            "d0: model Qwen/Qwen3-0.6B is not served (engine serves: other/model)");
  EXPECT_EQ(Transfer(report, "p0", "d0")["outcome"], "skipped");
  EXPECT_EQ(Transfer(report, "p0", "d1")["outcome"], "passed");
}

TEST_F(PreflightE2eTest, B18_WaitSecondsWaitsForAnEngineThatStartsLate) {
  ASSERT_NE(Sim("p0", "prefill"), nullptr);
  const int late_port = ClosedPort();
  engines_.push_back({{"iid", "d0"},
                      {"url", "http://127.0.0.1:" + std::to_string(late_port)},
                      {"role", "decode"}});
  const std::string config = WriteConfig(Config());
  // Without a wait the refused engine fails reach at once.
  const CheckRun now = RunCheck({"--config", config, "--json"});
  EXPECT_EQ(now.exit_code, 1) << now.err;
  // With one, the engine that starts listening a second later passes.
  std::unique_ptr<SimProcess> late;
  std::thread starter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(1200));
    auto sim = SimProcess::Start({"--engine-id", "d0", "--role", "decode", "--port",
                                  std::to_string(late_port), "--token-interval-ms", "1"});
    if (sim.ok()) late = std::move(*sim);
  });
  const CheckRun waited = RunCheck({"--config", config, "--json", "--wait-s", "30"});
  starter.join();
  ASSERT_NE(late, nullptr) << "the late engine did not start";
  EXPECT_EQ(waited.exit_code, 0) << waited.out << waited.err;
  EXPECT_THAT(waited.err, HasSubstr("waiting up to 30.0s for 2 engine(s)"));
  EXPECT_THAT(waited.err, HasSubstr("engine d0 is up after"));
  const json report = json::parse(waited.out, nullptr, false);
  ASSERT_TRUE(report.is_object()) << waited.out;
  EXPECT_EQ(Gate(report, "reach")["outcome"], "passed");
  EXPECT_EQ(Transfer(report, "p0", "d0")["outcome"], "passed");
  EXPECT_LT(waited.seconds, 30.0);

  // A wait that times out reports exactly what no wait reports.
  late.reset();
  const CheckRun timed_out = RunCheck({"--config", config, "--json", "--wait-s", "0.5"});
  EXPECT_EQ(timed_out.exit_code, 1) << timed_out.err;
  EXPECT_THAT(timed_out.err, HasSubstr("still loading: d0"));
  const json failed = json::parse(timed_out.out, nullptr, false);
  ASSERT_TRUE(failed.is_object()) << timed_out.out;
  EXPECT_THAT(Gate(failed, "reach")["detail"].get<std::string>(),
              StartsWith("d0: GET /health: "));
}

TEST_F(PreflightE2eTest, BadArgumentsExitTwoWithUsage) {
  const std::string config = WriteText(R"({"model":"m","engines":[
      {"iid":"a","url":"http://127.0.0.1:1"}]})");
  const std::vector<std::vector<std::string>> bad = {
      {},
      {"--json"},
      {"--config"},
      {"--config", config, "--bogus"},
      {"--config", config, "--pairs"},
      {"--config", config, "--pairs", "star"},
      {"--config", config, "extra"},
      {"--config", config, "--wait-s", "-1"},
      {"--config", config, "--wait-s", "soon"},
  };
  for (const auto& args : bad) {
    const CheckRun run = RunCheck(args);
    std::string joined;
    for (const std::string& a : args) joined += a + " ";
    EXPECT_EQ(run.exit_code, 2) << "args: " << joined << "\n" << run.err;
    EXPECT_THAT(run.err, HasSubstr("usage: narwhal-check --config PATH")) << joined;
    EXPECT_EQ(run.out, "") << joined;
  }
  const CheckRun help = RunCheck({"--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_THAT(help.out, StartsWith("usage: narwhal-check"));
}

TEST_F(PreflightE2eTest, InvalidConfigExitsOne) {
  const CheckRun invalid = RunCheck(
      {"--config", WriteText(R"({"model":"m","engines":[{"iid":"a","url":"http://127.0.0.1:1"}],
                       "engine":{"first_token_timeout_s":0}})"),
       "--json"});
  EXPECT_EQ(invalid.exit_code, 1);
  EXPECT_THAT(invalid.err, HasSubstr("engine.first_token_timeout_s must be > 0"));
  EXPECT_EQ(invalid.out, "");

  const CheckRun missing = RunCheck({"--config", dir_ + "/no-such-file.json"});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_THAT(missing.err, HasSubstr("cannot read"));
}

}  // namespace
}  // namespace narwhal
