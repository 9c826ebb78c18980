// Breakers end to end (SPEC B15, B17): the real narwhal-serve binary, spawned
// here with a generated fleet config and short timers, in front of real
// narwhal-sim engines with injected faults. Assertions read the router's
// /metrics, /ready and --journal file and the engines' /sim/requests.
// Every wait polls against a deadline.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/fakes/sim_process.h"

namespace narwhal::breaker_test {
namespace {

using json = nlohmann::json;
using narwhal::testing::SimProcess;
using Clock = std::chrono::steady_clock;

constexpr double kFirstToken = 0.5;
constexpr const char* kProbePrefix = "narwhal-probe-";

// `row[key]` when it is a string, else "" (journal fields may be null).
std::string Str(const json& row, const std::string& key) {
  const auto it = row.find(key);
  return it != row.end() && it->is_string() ? it->get<std::string>() : "";
}

// ------------------------------------------------------------ the router

// narwhal-serve on loopback port 0 with `config`, its journal and stderr in a
// scratch directory; SIGTERM (then SIGKILL) when the object goes away.
class Serve {
 public:
  static std::unique_ptr<Serve> Start(const json& config, std::string* error) {
    std::unique_ptr<Serve> s(new Serve());
    std::string pattern = ::testing::TempDir() + "narwhal-breakers-XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) {
      *error = "mkdtemp failed";
      return nullptr;
    }
    s->dir_ = pattern;
    const std::string config_path = s->dir_ + "/fleet.json";
    s->journal_path_ = s->dir_ + "/journal.jsonl";
    s->stderr_path_ = s->dir_ + "/serve.stderr";
    std::ofstream(config_path) << config.dump(2);

    int out[2];
    if (pipe(out) != 0) {
      *error = "pipe failed";
      return nullptr;
    }
    std::vector<std::string> args = {NARWHAL_SERVE_BINARY, "--config",  config_path,     "--http",
                                     "127.0.0.1:0",        "--grpc",    "127.0.0.1:0",   "--admin",
                                     "127.0.0.1:0",        "--journal", s->journal_path_};
    const pid_t pid = fork();
    if (pid < 0) {
      *error = "fork failed";
      return nullptr;
    }
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      dup2(out[1], STDOUT_FILENO);
      const int err = open(s->stderr_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (err >= 0) dup2(err, STDERR_FILENO);
      close(out[0]);
      close(out[1]);
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(out[1]);
    s->pid_ = pid;
    // "narwhal-serve ready http=HOST:PORT grpc=HOST:PORT admin=HOST:PORT"
    std::string buffer;
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    while (buffer.find('\n') == std::string::npos && Clock::now() < deadline) {
      pollfd p{out[0], POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      char chunk[512];
      const ssize_t n = read(out[0], chunk, sizeof(chunk));
      if (n <= 0) break;
      buffer.append(chunk, static_cast<size_t>(n));
    }
    close(out[0]);
    const std::string line = buffer.substr(0, buffer.find('\n'));
    std::istringstream fields(line);
    std::string word;
    std::map<std::string, std::string> keys;
    for (int k = 0; fields >> word; ++k) {
      if (k < 2) continue;  // "narwhal-serve ready"
      const size_t eq = word.find('=');
      if (eq != std::string::npos) keys[word.substr(0, eq)] = word.substr(eq + 1);
    }
    if (line.rfind("narwhal-serve ready ", 0) != 0 || keys.count("http") == 0) {
      *error = "no ready line (got \"" + line + "\"); stderr:\n" + s->Stderr();
      return nullptr;
    }
    const std::string& http = keys["http"];
    s->http_port_ = std::stoi(http.substr(http.rfind(':') + 1));
    return s;
  }

  ~Serve() {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    const auto deadline = Clock::now() + std::chrono::seconds(15);
    while (Clock::now() < deadline) {
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }

  int http_port() const { return http_port_; }

  std::string Stderr() const {
    std::ifstream in(stderr_path_);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string text = ss.str();
    return text.size() > 4000 ? text.substr(text.size() - 4000) : text;
  }

  std::vector<json> Journal() const {
    std::vector<json> rows;
    std::ifstream in(journal_path_);
    for (std::string line; std::getline(in, line);) {
      json row = json::parse(line, nullptr, false);
      if (row.is_object()) rows.push_back(std::move(row));
    }
    return rows;
  }
  // Journal event rows of `kind` about `iid`.
  std::vector<json> Events(const std::string& kind, const std::string& iid) const {
    std::vector<json> out;
    for (const json& row : Journal()) {
      if (Str(row, "event") == kind && Str(row, "iid") == iid) out.push_back(row);
    }
    return out;
  }

 private:
  Serve() = default;
  std::string dir_;
  std::string journal_path_;
  std::string stderr_path_;
  pid_t pid_ = -1;
  int http_port_ = 0;
};

struct Reply {
  int status = 0;
  std::string body;
};

Reply Get(int port, const std::string& path) {
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(5);
  client.set_read_timeout(10);
  httplib::Result r = client.Get(path);
  if (!r) return Reply{0, httplib::to_string(r.error())};
  return Reply{r->status, r->body};
}

Reply Complete(int port, const std::string& prompt) {
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(5);
  client.set_read_timeout(30);
  const json body = {{"model", "m"}, {"prompt", prompt}, {"max_tokens", 3}};
  httplib::Result r = client.Post("/v1/completions", body.dump(), "application/json");
  if (!r) return Reply{0, httplib::to_string(r.error())};
  return Reply{r->status, r->body};
}

// `n` requests at once; their statuses.
std::vector<int> Burst(int port, int n) {
  static std::atomic<int> counter{0};
  std::vector<int> statuses(n);
  std::vector<std::thread> threads;
  for (int k = 0; k < n; ++k) {
    threads.emplace_back([&, k] {
      statuses[k] = Complete(port, "breaker e2e request " + std::to_string(++counter)).status;
    });
  }
  for (std::thread& t : threads) t.join();
  return statuses;
}

// The value of one series in a Prometheus text exposition, or nullopt.
std::optional<double> MetricValue(const std::string& text, const std::string& name,
                                  const std::map<std::string, std::string>& labels) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    if (line.compare(0, name.size(), name) != 0) continue;
    std::map<std::string, std::string> got;
    size_t pos = name.size();
    if (pos < line.size() && line[pos] == '{') {
      const size_t end = line.find('}', pos);
      if (end == std::string::npos) continue;
      std::string inner = line.substr(pos + 1, end - pos - 1);
      size_t at = 0;
      while (at < inner.size()) {
        const size_t eq = inner.find('=', at);
        if (eq == std::string::npos || eq + 1 >= inner.size() || inner[eq + 1] != '"') break;
        const size_t close = inner.find('"', eq + 2);
        if (close == std::string::npos) break;
        got[inner.substr(at, eq - at)] = inner.substr(eq + 2, close - eq - 2);
        at = close + 1;
        if (at < inner.size() && inner[at] == ',') ++at;
      }
      pos = end + 1;
    } else if (pos >= line.size() || line[pos] != ' ') {
      continue;  // a longer name with this prefix
    }
    if (got != labels) continue;
    return std::stod(line.substr(pos + 1));
  }
  return std::nullopt;
}

std::optional<double> Metric(int port, const std::string& name,
                             const std::map<std::string, std::string>& labels) {
  const Reply r = Get(port, "/metrics");
  if (r.status != 200) return std::nullopt;
  return MetricValue(r.body, name, labels);
}

// Sum of every series of `name` whose labels include `labels`.
double MetricSum(int port, const std::string& name,
                 const std::map<std::string, std::string>& labels) {
  const Reply r = Get(port, "/metrics");
  double sum = 0;
  std::istringstream in(r.body);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(name + "{", 0) != 0) continue;
    bool match = true;
    for (const auto& [k, v] : labels) {
      match = match && line.find(k + "=\"" + v + "\"") != std::string::npos;
    }
    if (match) sum += std::stod(line.substr(line.rfind(' ') + 1));
  }
  return sum;
}

// Polls `done` every 20 ms until it holds or `seconds` pass.
bool WaitFor(const std::function<bool()>& done, double seconds) {
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(seconds));
  while (Clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return done();
}

// ------------------------------------------------------------ the engines

std::unique_ptr<SimProcess> StartSim(const std::string& iid, const std::string& role) {
  auto sim = SimProcess::Start(
      {"--engine-id", iid, "--role", role, "--model", "m", "--token-interval-ms", "1"});
  EXPECT_TRUE(sim.ok()) << sim.status();
  return sim.ok() ? std::move(*sim) : nullptr;
}

json Records(SimProcess& sim) {
  absl::StatusOr<json> r = sim.Requests();
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : json::array();
}

bool IsProbe(const json& record) {
  return record.contains("headers") && record["headers"].is_object() &&
         Str(record["headers"], "x-request-id").rfind(kProbePrefix, 0) == 0;
}

// Inference requests of `phase` the engine received: client traffic
// (probe = false) or breaker probes (probe = true).
std::vector<json> Inference(SimProcess& sim, const std::string& phase, bool probe) {
  std::vector<json> out;
  for (const json& r : Records(sim)) {
    if (Str(r, "phase") == phase && IsProbe(r) == probe) {
      out.push_back(r);
    }
  }
  return out;
}

int ServedClientDecodes(SimProcess& sim) {
  int n = 0;
  for (const json& r : Inference(sim, "decode", false)) {
    if (r["end"] == "complete" && r["status"] == 200) ++n;
  }
  return n;
}

json EngineEntry(const std::string& iid, const SimProcess& sim, const std::string& role) {
  return {{"iid", iid}, {"url", sim.url()}, {"role", role}};
}

json Config(const json& engines, const json& recovery) {
  json r = {{"eject_after", 3},
            {"failure_quarantine_s", 0},
            {"readmit_interval_s", 0.3},
            {"liveness_interval_s", 0},
            {"liveness_misses", 2}};
  for (const auto& [k, v] : recovery.items()) r[k] = v;
  return {{"model", "m"},
          {"engines", engines},
          {"serving",
           {{"max_attempts", 1},
            {"request_timeout_s", 20},
            {"prefill_timeout_s", 5},
            {"graceful_timeout_s", 1}}},
          {"engine",
           {{"first_token_timeout_s", kFirstToken},
            {"decode_read_timeout_s", 5},
            {"connect_timeout_s", 1},
            {"health_timeout_s", 1}}},
          {"recovery", r}};
}

std::unique_ptr<Serve> StartServe(const json& config) {
  std::string error;
  std::unique_ptr<Serve> serve = Serve::Start(config, &error);
  EXPECT_NE(serve, nullptr) << error;
  if (serve != nullptr) {
    const int port = serve->http_port();
    EXPECT_TRUE(WaitFor([&] { return Get(port, "/ready").status == 200; }, 10)) << serve->Stderr();
  }
  return serve;
}

// Bursts of `width` requests until `done` holds (checked between bursts) or
// `seconds` pass.
bool DriveUntil(int port, int width, const std::function<bool()>& done, double seconds) {
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(seconds));
  while (Clock::now() < deadline) {
    if (done()) return true;
    Burst(port, width);
  }
  return done();
}

// ------------------------------------------------------------------ B17

TEST(BreakerE2eTest, B17_SilentDecodeEngineLeavesPlacementAndReturnsAfterProbe) {
  auto p0 = StartSim("p0", "prefill");
  auto p1 = StartSim("p1", "prefill");
  auto d0 = StartSim("d0", "decode");
  auto d1 = StartSim("d1", "decode");
  ASSERT_TRUE(p0 && p1 && d0 && d1);
  auto serve =
      StartServe(Config({EngineEntry("p0", *p0, "prefill"), EngineEntry("p1", *p1, "prefill"),
                         EngineEntry("d0", *d0, "decode"), EngineEntry("d1", *d1, "decode")},
                        json::object()));
  ASSERT_NE(serve, nullptr);
  const int port = serve->http_port();

  // p0 turns client prefills away with 400 (the client's own refusal, no
  // evidence against p0): every transfer d0 fails on is made by p1, while p0
  // stays live and, by iid, is the first live producer — so a probe that
  // ignored the recorded producer would go to p0.
  ASSERT_TRUE(p0->SetFaults(json{{"faults",
                                  {{{"kind", "http_status"},
                                    {"status", 400},
                                    {"message", "prompt too long"},
                                    {"phase", "prefill"},
                                    {"times", -1}}}}})
                  .ok());
  ASSERT_TRUE(
      d0->SetFaults(
            json{{"faults",
                  {{{"kind", "silent_before_first_token"}, {"phase", "decode"}, {"times", -1}}}}})
          .ok());

  // Watch the held gauge while requests fail on d0: the hold lasts until
  // the first probe's decode leg times out.
  std::atomic<bool> stop{false};
  std::atomic<bool> held_seen{false};
  std::thread watcher([&] {
    while (!stop && !held_seen) {
      if (Metric(port, "narwhal_engine_held", {{"iid", "d0"}, {"kind", "inference"}}) == 1.0) {
        held_seen = true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  });
  const bool streak = DriveUntil(
      port, 4,
      [&] {
        return Metric(port, "narwhal_engine_breaker_streak", {{"class", "stream"}, {"iid", "d0"}})
                   .value_or(0) >= 3;
      },
      40);
  EXPECT_TRUE(streak) << serve->Stderr();
  EXPECT_TRUE(WaitFor([&] { return held_seen.load(); }, 5));
  stop = true;
  watcher.join();
  ASSERT_TRUE(streak);

  // The hold, and the failed transfers behind it: all produced by p1.
  ASSERT_TRUE(WaitFor([&] { return !serve->Events("engine_hold_started", "d0").empty(); }, 5));
  EXPECT_EQ(serve->Events("engine_hold_started", "d0")[0]["hold_kind"], "inference");
  int failed_on_d0 = 0;
  for (const json& row : serve->Journal()) {
    if (row.contains("event") || Str(row, "decode_iid") != "d0") continue;
    EXPECT_EQ(row["terminal"], "failed");
    EXPECT_EQ(row["prefill_iid"], "p1");
    ++failed_on_d0;
  }
  EXPECT_GE(failed_on_d0, 3);

  // The inference probe: a fresh handoff from the original producer p1.
  ASSERT_TRUE(WaitFor([&] { return !serve->Events("engine_probe", "d0").empty(); }, 10))
      << serve->Stderr();
  const json first_probe = serve->Events("engine_probe", "d0")[0];
  EXPECT_EQ(first_probe["probe_kind"], "inference");
  EXPECT_EQ(first_probe["producer"], "p1");
  EXPECT_EQ(first_probe["outcome"], "failed");
  const std::vector<json> probe_prefills = Inference(*p1, "prefill", /*probe=*/true);
  ASSERT_FALSE(probe_prefills.empty());
  EXPECT_NE(probe_prefills[0]["body"]["prompt"].get<std::string>().find("breaker verification"),
            std::string::npos);
  EXPECT_EQ(probe_prefills[0]["body"]["max_tokens"], 1);
  EXPECT_TRUE(Inference(*p0, "prefill", /*probe=*/true).empty());
  const std::vector<json> probe_decodes = Inference(*d0, "decode", /*probe=*/true);
  ASSERT_FALSE(probe_decodes.empty());
  EXPECT_EQ(probe_decodes[0]["body"]["kv_transfer_params"]["remote_engine_id"], "p1");

  // Out of placement: new requests never reach d0 while d1 serves them.
  ASSERT_TRUE(p0->ClearFaults().ok());
  const size_t d0_client = Inference(*d0, "decode", false).size();
  const int d1_served = ServedClientDecodes(*d1);
  for (int k = 0; k < 3; ++k) {
    for (int status : Burst(port, 3)) EXPECT_EQ(status, 200);
  }
  EXPECT_EQ(Inference(*d0, "decode", false).size(), d0_client);
  EXPECT_TRUE(WaitFor([&] { return ServedClientDecodes(*d1) == d1_served + 9; }, 5))
      << ServedClientDecodes(*d1) - d1_served;

  // The engine recovers: the next probe passes and d0 is readmitted.
  ASSERT_TRUE(d0->ClearFaults().ok());
  ASSERT_TRUE(WaitFor([&] { return !serve->Events("engine_readmitted", "d0").empty(); }, 20))
      << serve->Stderr();
  EXPECT_EQ(serve->Events("engine_readmitted", "d0")[0]["evidence"], "verification");
  const std::vector<json> probes = serve->Events("engine_probe", "d0");
  ASSERT_FALSE(probes.empty());
  EXPECT_EQ(probes.back()["outcome"], "passed");
  EXPECT_EQ(probes.back()["producer"], "p1");
  for (const json& probe : probes) EXPECT_NE(Str(probe, "producer"), "p0");
  EXPECT_GE(MetricSum(port, "narwhal_engine_readmissions_total", {{"iid", "d0"}}), 1);

  // Back in placement: client requests are served by d0 again.
  EXPECT_TRUE(DriveUntil(
      port, 2, [&] { return ServedClientDecodes(*d0) > 0; }, 15));
}

TEST(BreakerE2eTest, B17_KilledEngineIsEjectedAndReadmittedAfterRestart) {
  auto p0 = StartSim("p0", "prefill");
  auto d0 = StartSim("d0", "decode");
  auto d1 = StartSim("d1", "decode");
  ASSERT_TRUE(p0 && d0 && d1);
  auto serve =
      StartServe(Config({EngineEntry("p0", *p0, "prefill"), EngineEntry("d0", *d0, "decode"),
                         EngineEntry("d1", *d1, "decode")},
                        json::object()));
  ASSERT_NE(serve, nullptr);
  const int port = serve->http_port();

  d0->Kill(SIGKILL);
  ASSERT_TRUE(d0->Wait(absl::Seconds(5)).has_value());
  ASSERT_TRUE(DriveUntil(
      port, 2,
      [&] {
        return Metric(port, "narwhal_engine_ejections_total",
                      {{"cause", "connection"}, {"iid", "d0"}})
                   .value_or(0) >= 1;
      },
      20))
      << serve->Stderr();
  const std::vector<json> ejected = serve->Events("engine_ejected", "d0");
  ASSERT_EQ(ejected.size(), 1u);
  EXPECT_EQ(ejected[0]["cause"], "connection");
  EXPECT_TRUE(serve->Events("engine_readmitted", "d0").empty());
  // Ejected: every request goes to d1 and succeeds.
  for (int status : Burst(port, 4)) EXPECT_EQ(status, 200);

  ASSERT_TRUE(d0->Restart().ok());
  ASSERT_TRUE(WaitFor([&] { return !serve->Events("engine_readmitted", "d0").empty(); }, 20))
      << serve->Stderr();
  EXPECT_EQ(serve->Events("engine_readmitted", "d0")[0]["evidence"], "health");
  EXPECT_GE(
      Metric(port, "narwhal_engine_readmissions_total", {{"evidence", "health"}, {"iid", "d0"}})
          .value_or(0),
      1);
  EXPECT_TRUE(DriveUntil(
      port, 2, [&] { return ServedClientDecodes(*d0) > 0; }, 15));
}

TEST(BreakerE2eTest, B17_LastDecodeEngineIsNeverHeld) {
  auto p0 = StartSim("p0", "prefill");
  auto d0 = StartSim("d0", "decode");
  ASSERT_TRUE(p0 && d0);
  auto serve = StartServe(Config(
      {EngineEntry("p0", *p0, "prefill"), EngineEntry("d0", *d0, "decode")}, json::object()));
  ASSERT_NE(serve, nullptr);
  const int port = serve->http_port();
  ASSERT_TRUE(
      d0->SetFaults(
            json{{"faults",
                  {{{"kind", "silent_before_first_token"}, {"phase", "decode"}, {"times", -1}}}}})
          .ok());
  for (int k = 0; k < 5; ++k) {
    EXPECT_EQ(Complete(port, "last engine " + std::to_string(k)).status, 504);
  }
  // Every request reached d0: it never left placement.
  EXPECT_EQ(Inference(*d0, "decode", false).size(), 5u);
  EXPECT_GE(Metric(port, "narwhal_engine_breaker_streak", {{"class", "stream"}, {"iid", "d0"}})
                .value_or(0),
            3);
  EXPECT_EQ(Metric(port, "narwhal_engine_held", {{"iid", "d0"}, {"kind", "inference"}}), 0.0);
  EXPECT_EQ(Get(port, "/ready").status, 200);
  const std::vector<json> suppressed = serve->Events("engine_hold_suppressed", "d0");
  ASSERT_FALSE(suppressed.empty());
  EXPECT_EQ(suppressed[0]["cause"], "last engine able to serve its role");
  EXPECT_TRUE(serve->Events("engine_hold_started", "d0").empty());
  EXPECT_TRUE(serve->Events("engine_probe", "d0").empty());

  ASSERT_TRUE(d0->ClearFaults().ok());
  EXPECT_EQ(Complete(port, "last engine recovered").status, 200);
}

TEST(BreakerE2eTest, B17_WholeWaveHoldsTheFleet) {
  auto p0 = StartSim("p0", "prefill");
  auto d0 = StartSim("d0", "decode");
  auto d1 = StartSim("d1", "decode");
  ASSERT_TRUE(p0 && d0 && d1);
  auto serve =
      StartServe(Config({EngineEntry("p0", *p0, "prefill"), EngineEntry("d0", *d0, "decode"),
                         EngineEntry("d1", *d1, "decode")},
                        {{"engine_restart_policy", "whole_wave"},
                         {"liveness_interval_s", 0.2},
                         {"liveness_misses", 2}}));
  ASSERT_NE(serve, nullptr);
  const int port = serve->http_port();
  EXPECT_EQ(Complete(port, "before the wave").status, 200);

  d1->Kill(SIGKILL);
  ASSERT_TRUE(d1->Wait(absl::Seconds(5)).has_value());
  Reply ready;
  ASSERT_TRUE(WaitFor(
      [&] {
        ready = Get(port, "/ready");
        return ready.status == 503;
      },
      10))
      << serve->Stderr();
  const json reason = json::parse(ready.body, nullptr, false);
  ASSERT_TRUE(reason.is_object()) << ready.body;
  EXPECT_EQ(reason["reason"], "whole-wave hold: engine d1 is ejected (liveness)");
  EXPECT_EQ(serve->Events("engine_ejected", "d1").at(0)["cause"], "liveness");
  // The whole fleet is held, healthy engines included.
  const size_t d0_before = Inference(*d0, "decode", false).size();
  const size_t p0_before = Inference(*p0, "prefill", false).size();
  const Reply refused = Complete(port, "during the wave");
  EXPECT_EQ(refused.status, 503) << refused.body;
  EXPECT_NE(refused.body.find("d1"), std::string::npos) << refused.body;
  EXPECT_EQ(Inference(*d0, "decode", false).size(), d0_before);
  EXPECT_EQ(Inference(*p0, "prefill", false).size(), p0_before);

  ASSERT_TRUE(d1->Restart().ok());
  EXPECT_TRUE(WaitFor([&] { return Get(port, "/ready").status == 200; }, 15)) << serve->Stderr();
  EXPECT_EQ(serve->Events("engine_readmitted", "d1").at(0)["evidence"], "health");
  EXPECT_EQ(Complete(port, "after the wave").status, 200);
}

// ------------------------------------------------------------------ B15

TEST(BreakerE2eTest, B15_QuarantineExpires) {
  constexpr double kQuarantine = 1.5;
  auto p0 = StartSim("p0", "prefill");
  auto d0 = StartSim("d0", "decode");
  auto d1 = StartSim("d1", "decode");
  ASSERT_TRUE(p0 && d0 && d1);
  auto serve =
      StartServe(Config({EngineEntry("p0", *p0, "prefill"), EngineEntry("d0", *d0, "decode"),
                         EngineEntry("d1", *d1, "decode")},
                        {{"failure_quarantine_s", kQuarantine}}));
  ASSERT_NE(serve, nullptr);
  const int port = serve->http_port();

  // One failed decode leg on d0.
  ASSERT_TRUE(
      d0->SetFaults(
            json{{"faults",
                  {{{"kind", "http_status"}, {"status", 500}, {"phase", "decode"}, {"times", 1}}}}})
          .ok());
  ASSERT_TRUE(DriveUntil(
      port, 2, [&] { return !serve->Events("engine_hold_started", "d0").empty(); }, 15))
      << serve->Stderr();
  const json started = serve->Events("engine_hold_started", "d0")[0];
  EXPECT_EQ(started["hold_kind"], "timed");
  const double from = started["at"].get<double>();
  EXPECT_EQ(Metric(port, "narwhal_engine_quarantined", {{"iid", "d0"}}), 1.0);

  // Until it expires, d0 gets nothing; d1 serves.
  const int d1_before = ServedClientDecodes(*d1);
  EXPECT_TRUE(DriveUntil(
      port, 2,
      [&] {
        return !serve->Events("engine_hold_ended", "d0").empty() ||
               Metric(port, "narwhal_engine_quarantined", {{"iid", "d0"}}) != 1.0;
      },
      10));
  EXPECT_GE(ServedClientDecodes(*d1), d1_before + 4);
  ASSERT_TRUE(WaitFor([&] { return !serve->Events("engine_hold_ended", "d0").empty(); }, 5));
  const json ended = serve->Events("engine_hold_ended", "d0")[0];
  EXPECT_EQ(ended["cause"], "expired");
  EXPECT_NEAR(ended["at"].get<double>() - from, kQuarantine, 0.5);
  for (const json& r : Inference(*d0, "decode", false)) {
    const double at = r["at"].get<double>();
    EXPECT_FALSE(at > from + 0.2 && at < from + kQuarantine - 0.05)
        << "d0 received a client decode " << at - from << " s into its quarantine";
  }

  // Then it serves again.
  EXPECT_TRUE(DriveUntil(
      port, 2, [&] { return ServedClientDecodes(*d0) > 0; }, 15));
  EXPECT_EQ(Metric(port, "narwhal_engine_quarantined", {{"iid", "d0"}}), 0.0);
}

}  // namespace
}  // namespace narwhal::breaker_test
