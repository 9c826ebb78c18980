// End-to-end tests of a live fleet (SPEC §13, B20-B25): a real narwhal-serve
// in front of real narwhal-sim engines whose fleet changes while it runs —
// its config file rewritten and SIGHUP sent, a Kubernetes-style ConfigMap
// symlink swap seen by the poll, invalid and restart-only files refused, the
// admin AddEngine/RemoveEngine/ReloadConfig calls, the join gate, the
// breaker state an engine keeps across a leave and return (and the evidence
// of a leg on an engine that left, which never lands on its successor), the
// drain of a leaving engine (and its cut at membership.drain_timeout_s) and a
// DNS group answered by a real dnsmasq.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "narwhal/admin/v1/admin.grpc.pb.h"
#include "tests/e2e/e2e_util.h"
#include "tests/fakes/dnsmasq_process.h"

namespace narwhal::testing {
namespace {

namespace pb = narwhal::admin::v1;

// Writes `text` to `path` whole: a temporary file renamed over it, so a
// reader (the config poll) never sees half a file.
void WriteFileAtomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    ASSERT_TRUE(out.good()) << tmp;
    out << text;
    out.close();
    ASSERT_TRUE(out.good()) << tmp;
  }
  ASSERT_EQ(rename(tmp.c_str(), path.c_str()), 0) << path;
}

// Occurrences of `needle` in `text`.
int Count(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) {
    ++n;
  }
  return n;
}

// The lines of `text` that contain `needle`.
std::vector<std::string> LinesWith(const std::string& text, const std::string& needle) {
  std::vector<std::string> out;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (absl::StrContains(line, needle)) out.emplace_back(line);
  }
  return out;
}

// The string at `key` of `object`, "" when it is absent or not a string
// (journal fields are null when they do not apply).
std::string Str(const json& object, const std::string& key) {
  if (!object.is_object()) return "";
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : "";
}

json EngineEntry(const std::string& iid, const std::string& url, const std::string& role) {
  return {{"iid", iid}, {"url", url}, {"role", role}};
}

class LiveFleetTest : public E2eTest {
 protected:
  // Overrides of every router here: failed join checks are retried soon
  // (recovery.readmit_interval_s), and the file is re-read on SIGHUP and
  // ReloadConfig only unless a test turns the poll on.
  static json LiveOverrides(const json& more = json::object()) {
    json overrides = {{"recovery", {{"readmit_interval_s", 0.2}}},
                      {"membership", {{"config_poll_s", 0}}}};
    overrides.merge_patch(more);
    return overrides;
  }

  // Starts a router on `config` (loopback listeners from flags).
  ServeProcess& AdoptStarted(const json& config) {
    ServeOptions options;
    options.config = config;
    return Adopt(ServeProcess::Start(options));
  }

  static std::string ConfigPath(ServeProcess& router) {
    return router.scratch_dir() + "/fleet.json";
  }

  static std::unique_ptr<pb::Admin::Stub> Admin(ServeProcess& router) {
    return pb::Admin::NewStub(
        grpc::CreateChannel(router.admin_address(), grpc::InsecureChannelCredentials()));
  }

  static void Deadline(grpc::ClientContext* context, int seconds = 10) {
    context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(seconds));
  }

  // ListEngines by iid (empty on an RPC failure, which fails the test).
  static std::map<std::string, pb::Engine> Engines(ServeProcess& router) {
    grpc::ClientContext context;
    Deadline(&context);
    pb::ListEnginesResponse response;
    const grpc::Status s =
        Admin(router)->ListEngines(&context, pb::ListEnginesRequest(), &response);
    EXPECT_TRUE(s.ok()) << s.error_message();
    std::map<std::string, pb::Engine> out;
    for (const pb::Engine& e : response.engines()) out[e.iid()] = e;
    return out;
  }

  // The engine's state in ListEngines, "" when it is not listed.
  static std::string State(ServeProcess& router, const std::string& iid) {
    const std::map<std::string, pb::Engine> engines = Engines(router);
    auto it = engines.find(iid);
    return it == engines.end() ? "" : it->second.state();
  }

  static bool WaitState(ServeProcess& router, const std::string& iid, const std::string& state,
                        absl::Duration timeout = absl::Seconds(15)) {
    return WaitUntil([&] { return State(router, iid) == state; }, timeout, absl::Milliseconds(50));
  }

  static grpc::Status AddEngine(ServeProcess& router, const std::string& iid,
                                const std::string& url, const std::string& role,
                                pb::Engine* out = nullptr) {
    grpc::ClientContext context;
    Deadline(&context);
    pb::AddEngineRequest request;
    request.set_iid(iid);
    request.set_url(url);
    request.set_role(role);
    pb::Engine engine;
    grpc::Status s = Admin(router)->AddEngine(&context, request, &engine);
    if (out != nullptr) *out = engine;
    return s;
  }

  static grpc::Status RemoveEngine(ServeProcess& router, const std::string& iid,
                                   pb::Engine* out = nullptr) {
    grpc::ClientContext context;
    Deadline(&context);
    pb::RemoveEngineRequest request;
    request.set_iid(iid);
    pb::Engine engine;
    grpc::Status s = Admin(router)->RemoveEngine(&context, request, &engine);
    if (out != nullptr) *out = engine;
    return s;
  }

  static pb::ReloadConfigResponse ReloadConfig(ServeProcess& router) {
    grpc::ClientContext context;
    Deadline(&context, 20);
    pb::ReloadConfigResponse response;
    const grpc::Status s =
        Admin(router)->ReloadConfig(&context, pb::ReloadConfigRequest(), &response);
    EXPECT_TRUE(s.ok()) << "ReloadConfig: " << s.error_code() << " " << s.error_message();
    return response;
  }

  // GetConfig's `_reload` (how the last reload went).
  static json ReloadStatus(ServeProcess& router) {
    grpc::ClientContext context;
    Deadline(&context);
    google::protobuf::Struct config;
    const grpc::Status s = Admin(router)->GetConfig(&context, pb::GetConfigRequest(), &config);
    EXPECT_TRUE(s.ok()) << s.error_message();
    json out = json::object();
    auto it = config.fields().find("_reload");
    if (it == config.fields().end()) return out;
    for (const auto& [key, value] : it->second.struct_value().fields()) {
      if (value.has_string_value()) {
        out[key] = value.string_value();
      } else if (value.has_number_value()) {
        out[key] = value.number_value();
      } else {
        out[key] = nullptr;
      }
    }
    return out;
  }

  // The events WatchEvents sends from since_seq 0 (the replay, then live
  // ones) up to the first that `until` accepts, or all it sent within 10 s.
  static std::vector<pb::Event> WatchUntil(ServeProcess& router,
                                           const std::function<bool(const pb::Event&)>& until) {
    grpc::ClientContext context;
    Deadline(&context, 10);
    pb::WatchEventsRequest request;
    request.set_since_seq(0);
    auto reader = Admin(router)->WatchEvents(&context, request);
    std::vector<pb::Event> events;
    pb::Event event;
    while (reader->Read(&event)) {
      events.push_back(event);
      if (until(event)) break;
    }
    context.TryCancel();
    return events;
  }

  // The journal's event rows of `kind` about `iid`.
  static std::vector<json> EventRows(ServeProcess& router, const std::string& kind,
                                     const std::string& iid) {
    std::vector<json> out;
    for (const json& row : router.EventRows()) {
      if (Str(row, "event") == kind && Str(row, "iid") == iid) out.push_back(row);
    }
    return out;
  }

  // Waits (the journal is written by a thread of its own) until there is an
  // event row of `kind` about `iid`; returns the first, or null.
  static json WaitEventRow(ServeProcess& router, const std::string& kind, const std::string& iid,
                           absl::Duration timeout = absl::Seconds(10)) {
    std::vector<json> rows;
    WaitUntil(
        [&] {
          rows = EventRows(router, kind, iid);
          return !rows.empty();
        },
        timeout, absl::Milliseconds(20));
    EXPECT_FALSE(rows.empty()) << "no " << kind << " event row for " << iid;
    return rows.empty() ? json() : rows.front();
  }

  double Metric(ServeProcess& router, const std::string& name,
                const std::map<std::string, std::string>& labels = {}) {
    return MetricSum(Metrics(router), name, labels);
  }

  // Sends sequential non-streaming requests until one is decoded by `iid`
  // (at most `attempts`); every one must complete. Returns whether one did.
  bool ServedBy(ServeProcess& router, const std::string& iid, int attempts = 12) {
    for (int i = 0; i < attempts; ++i) {
      HttpCapture c = Send(router, kCompletions, Completion("live fleet " + iid, 3, false));
      EXPECT_EQ(c.status, 200) << Describe(c);
      if (c.status != 200) return false;
      const json row = JournalRow(router, c);
      if (Str(row, "decode_iid") == iid) return true;
    }
    return false;
  }

  // The decode engines of `n` sequential non-streaming requests (each must
  // complete).
  std::map<std::string, int> DecodeEngines(ServeProcess& router, int n) {
    std::map<std::string, int> out;
    for (int i = 0; i < n; ++i) {
      HttpCapture c =
          Send(router, kCompletions, Completion("spread " + std::to_string(i), 2, false));
      EXPECT_EQ(c.status, 200) << Describe(c);
      ++out[Str(JournalRow(router, c), "decode_iid")];
    }
    return out;
  }

  // A streaming request sent from a thread of its own (counted for the
  // journal check); Join() returns what it captured.
  class BackgroundStream {
   public:
    BackgroundStream(LiveFleetTest& test, ServeProcess& router, const json& body,
                     absl::Duration read_timeout = absl::Seconds(10)) {
      test.CountRequest(router);
      const int port = router.http_port();
      thread_ = std::thread([this, port, body, read_timeout] {
        HttpCaptureOptions options;
        options.read_timeout = read_timeout;
        capture_ = PostCapture("127.0.0.1", port, kCompletions, body.dump(), options);
      });
    }
    ~BackgroundStream() {
      if (thread_.joinable()) thread_.join();
    }
    HttpCapture& Join() {
      if (thread_.joinable()) thread_.join();
      return capture_;
    }

   private:
    std::thread thread_;
    HttpCapture capture_;
  };

  // Waits until `sim` has a decode leg in flight (its request log has one
  // without an end).
  static bool WaitDecodeLegOpen(SimProcess& sim, absl::Duration timeout = absl::Seconds(10)) {
    return WaitUntil(
        [&] {
          for (const json& r : SimRequests(sim, "decode")) {
            if (r["end"].is_null()) return true;
          }
          return false;
        },
        timeout, absl::Milliseconds(20));
  }

  // Waits until a decode leg open on `sim` has sent `tokens` tokens (the
  // sim's request log counts them as it streams).
  static bool WaitDecodeTokens(SimProcess& sim, int tokens,
                               absl::Duration timeout = absl::Seconds(10)) {
    return WaitUntil(
        [&] {
          for (const json& r : SimRequests(sim, "decode")) {
            const json& sent = r["tokens_sent"];
            if (r["end"].is_null() && sent.is_number() && sent.get<int>() >= tokens) return true;
          }
          return false;
        },
        timeout, absl::Milliseconds(20));
  }
};

// ------------------------------------------------------------- B20 reload

TEST_F(LiveFleetTest, SighupAddsADecodeEngineThatJoinsThenServesWhileAStreamRunsAcross) {
  const json config = FleetConfig({{"p0", SimUrl("p0"), "prefill"}, {"d0", SimUrl("d0"), "decode"}},
                                  LiveOverrides());
  ServeProcess& router = AdoptStarted(config);
  Sim("d1");  // started before the reload names it
  ASSERT_TRUE(WaitState(router, "d0", "serving")) << router.StderrTail();
  EXPECT_EQ(Metric(router, "narwhal_config_generation"), 1);
  EXPECT_EQ(Metric(router, "narwhal_fleet_engines", {{"role", "decode"}}), 1);

  // A stream in flight across the reload: 20 tokens 100 ms apart on d0.
  SetFaults(
      "d0",
      json::array(
          {{{"kind", "slow_tokens"}, {"phase", "decode"}, {"interval_ms", 100}, {"times", 1}}}));
  BackgroundStream across(*this, router, Completion("across the reload", 20, true));
  ASSERT_TRUE(WaitDecodeTokens(Sim("d0"), 2)) << router.StderrTail();

  json next = config;
  next["engines"].push_back(EngineEntry("d1", SimUrl("d1"), "decode"));
  WriteFileAtomically(ConfigPath(router), next.dump(2));
  router.Signal(SIGHUP);

  // d1 appears (source file), passes its join check and is placed.
  ASSERT_TRUE(WaitState(router, "d1", "serving")) << router.StderrTail();
  const std::map<std::string, pb::Engine> engines = Engines(router);
  EXPECT_EQ(engines.at("d1").source(), "file");
  EXPECT_EQ(engines.at("d1").url(), SimUrl("d1"));
  EXPECT_EQ(engines.at("d1").role(), "decode");
  ASSERT_TRUE(WaitUntil([&] { return !EventRows(router, "engine_joined", "d1").empty(); },
                        absl::Seconds(5)));
  const json joined = EventRows(router, "engine_joined", "d1").front();
  EXPECT_EQ(Str(joined, "source"), "file") << joined.dump();
  EXPECT_EQ(Str(joined, "cause"), "join checks passed") << joined.dump();
  // Its join check decoded a real handoff before any client leg reached it.
  EXPECT_FALSE(SimRequests(Sim("d1"), "decode").empty());

  // The stream admitted before the reload ends whole, under generation 1.
  HttpCapture& stream = across.Join();
  ASSERT_EQ(stream.status, 200) << Describe(stream);
  EXPECT_TRUE(stream.saw_done()) << Describe(stream);
  EXPECT_EQ(TokenEvents(stream).size(), 20u) << Describe(stream);
  const json across_row = JournalRow(router, stream);
  EXPECT_EQ(across_row["terminal"], "completed") << across_row.dump();
  EXPECT_EQ(across_row["decode_iid"], "d0") << across_row.dump();
  EXPECT_EQ(across_row["fleet_generation"], 1) << across_row.dump();

  // d1 serves client requests, placed under generation 2.
  ASSERT_TRUE(ServedBy(router, "d1")) << router.StderrTail();
  const std::vector<json> rows = router.TerminalRows();
  EXPECT_EQ(rows.back()["fleet_generation"], 2) << rows.back().dump();

  // One reload, applied, and one log line listing what it changed.
  const std::vector<MetricSample> m = Metrics(router);
  EXPECT_EQ(MetricSum(m, "narwhal_config_reloads_total", {{"result", "applied"}}), 1);
  EXPECT_EQ(MetricSum(m, "narwhal_config_reloads_total", {{"result", "rejected"}}), 0);
  EXPECT_EQ(MetricSum(m, "narwhal_config_generation"), 2);
  EXPECT_EQ(MetricSum(m, "narwhal_fleet_engines", {{"role", "decode"}, {"state", "serving"}}), 2);
  EXPECT_EQ(
      MetricSum(m, "narwhal_membership_changes_total", {{"source", "file"}, {"change", "joined"}}),
      1);
  const std::vector<std::string> lines = LinesWith(router.Stderr(), "config reload");
  ASSERT_EQ(lines.size(), 1u) << router.Stderr();
  EXPECT_TRUE(absl::StrContains(lines[0], "config reload (SIGHUP) applied: generation 2"))
      << lines[0];
  EXPECT_TRUE(absl::StrContains(lines[0], "engines joined d1")) << lines[0];
}

TEST_F(LiveFleetTest, AConfigMapSymlinkSwapIsPickedUpByThePollWithoutASignal) {
  // The layout kubelet makes for a mounted ConfigMap: fleet.json ->
  // ..data/fleet.json, ..data -> ..<timestamp>, swapped by a rename.
  absl::StatusOr<std::string> dir = MakeScratchDir("live-fleet-configmap-");
  ASSERT_TRUE(dir.ok()) << dir.status();
  const std::string volume = *dir;
  struct RemoveAtEnd {
    std::string path;
    ~RemoveAtEnd() {
      std::error_code ignored;
      std::filesystem::remove_all(path, ignored);
    }
  } remove_volume{volume};
  auto version = [&](const std::string& name, const json& config) {
    ASSERT_EQ(mkdir((volume + "/" + name).c_str(), 0755), 0) << name;
    WriteFileAtomically(volume + "/" + name + "/fleet.json", config.dump(2));
  };
  auto swap_data = [&](const std::string& name) {
    const std::string tmp = volume + "/..data_tmp";
    ASSERT_EQ(symlink(name.c_str(), tmp.c_str()), 0) << name;
    ASSERT_EQ(rename(tmp.c_str(), (volume + "/..data").c_str()), 0) << name;
  };

  const json first = FleetConfig({{"p0", SimUrl("p0"), "prefill"}, {"d0", SimUrl("d0"), "decode"}},
                                 LiveOverrides({{"membership", {{"config_poll_s", 0.1}}}}));
  json second = first;
  second["engines"].push_back(EngineEntry("d1", SimUrl("d1"), "decode"));
  version("..2026_01_01_00_00_00.1", first);
  ASSERT_EQ(symlink("..2026_01_01_00_00_00.1", (volume + "/..data").c_str()), 0);
  ASSERT_EQ(symlink("..data/fleet.json", (volume + "/fleet.json").c_str()), 0);
  Sim("d1");

  ServeOptions options;
  options.config = nullptr;
  options.args = {"--config", volume + "/fleet.json"};
  ServeProcess& router = Adopt(ServeProcess::Start(options));
  ASSERT_TRUE(WaitState(router, "d0", "serving")) << router.StderrTail();

  // The update: a new directory, ..data swapped to it. No signal.
  version("..2026_01_01_00_01_00.2", second);
  swap_data("..2026_01_01_00_01_00.2");
  ASSERT_TRUE(WaitState(router, "d1", "serving")) << router.StderrTail();
  ASSERT_TRUE(ServedBy(router, "d1")) << router.StderrTail();
  EXPECT_EQ(Metric(router, "narwhal_config_reloads_total", {{"result", "applied"}}), 1);
  EXPECT_EQ(Metric(router, "narwhal_config_generation"), 2);
  std::vector<std::string> lines = LinesWith(router.Stderr(), "config reload");
  ASSERT_EQ(lines.size(), 1u) << router.Stderr();
  EXPECT_TRUE(absl::StrContains(lines[0], "config reload (file change) applied: generation 2"))
      << lines[0];

  // A swap to the same bytes (kubelet re-projecting an unchanged map) is no
  // change: several polls later the next real change is reload number 2.
  version("..2026_01_01_00_02_00.3", second);
  swap_data("..2026_01_01_00_02_00.3");
  absl::SleepFor(absl::Milliseconds(600));  // six polls
  // d1 leaves again.
  const json third = first;
  version("..2026_01_01_00_03_00.4", third);
  swap_data("..2026_01_01_00_03_00.4");
  ASSERT_TRUE(WaitUntil([&] { return State(router, "d1").empty(); }, absl::Seconds(15)))
      << router.StderrTail();
  EXPECT_EQ(Metric(router, "narwhal_config_reloads_total", {{"result", "applied"}}), 2);
  EXPECT_EQ(Metric(router, "narwhal_config_generation"), 3);
  lines = LinesWith(router.Stderr(), "config reload");
  ASSERT_EQ(lines.size(), 2u) << router.Stderr();
  EXPECT_TRUE(absl::StrContains(lines[1], "generation 3: engines left d1")) << lines[1];
  ASSERT_TRUE(WaitEventRow(router, "engine_left", "d1").is_object());
  EXPECT_EQ(DecodeEngines(router, 3), (std::map<std::string, int>{{"d0", 3}}));
}

TEST_F(LiveFleetTest, AnInvalidFileIsRefusedWithTheKeyPathAndChangesNothing) {
  const json config = FleetConfig({{"p0", SimUrl("p0"), "prefill"}, {"d0", SimUrl("d0"), "decode"}},
                                  LiveOverrides());
  ServeProcess& router = AdoptStarted(config);
  ASSERT_TRUE(WaitState(router, "d0", "serving")) << router.StderrTail();

  // A new engine and an out-of-range key: the whole file is refused.
  json bad = config;
  bad["engines"].push_back(EngineEntry("d1", SimUrl("d1"), "decode"));
  bad["serving"]["max_attempts"] = 5;
  WriteFileAtomically(ConfigPath(router), bad.dump(2));
  router.Signal(SIGHUP);
  ASSERT_TRUE(WaitUntil(
      [&] {
        return Metric(router, "narwhal_config_reloads_total", {{"result", "rejected"}}) == 1;
      },
      absl::Seconds(10)))
      << router.StderrTail();
  const std::vector<std::string> lines = LinesWith(router.Stderr(), "config reload");
  ASSERT_EQ(lines.size(), 1u) << router.Stderr();
  EXPECT_TRUE(absl::StrContains(lines[0], "config reload (SIGHUP) rejected, nothing changed"))
      << lines[0];
  EXPECT_TRUE(absl::StrContains(lines[0], "serving.max_attempts must be between 1 and 3 (got 5)"))
      << lines[0];
  EXPECT_TRUE(absl::StrContains(lines[0], " ERROR ") || absl::StrContains(lines[0], "error"))
      << lines[0];

  // Nothing changed: no d1, generation 1, still one attempt per request.
  EXPECT_EQ(Metric(router, "narwhal_config_generation"), 1);
  EXPECT_EQ(Metric(router, "narwhal_config_reloads_total", {{"result", "applied"}}), 0);
  EXPECT_EQ(State(router, "d1"), "");
  json status = ReloadStatus(router);
  EXPECT_EQ(Str(status, "last_result"), "rejected") << status.dump();
  EXPECT_EQ(Str(status, "last_trigger"), "SIGHUP") << status.dump();
  EXPECT_TRUE(absl::StrContains(Str(status, "last_error"), "serving.max_attempts"))
      << status.dump();
  HttpCapture c = Send(router, kCompletions, Completion("still generation 1", 2, false));
  ASSERT_EQ(c.status, 200) << Describe(c);
  EXPECT_EQ(JournalRow(router, c)["fleet_generation"], 1);

  // ReloadConfig answers the same refusal (an OK call whose result says
  // rejected, with the error the log line names).
  const pb::ReloadConfigResponse answer = ReloadConfig(router);
  EXPECT_EQ(answer.result(), "rejected");
  EXPECT_EQ(answer.generation(), 1);
  EXPECT_TRUE(absl::StrContains(lines[0], answer.error()))
      << "log: " << lines[0] << "\nanswer: " << answer.error();
  EXPECT_TRUE(absl::StartsWith(answer.error(), "config " + ConfigPath(router) + ": "))
      << answer.error();
  EXPECT_TRUE(answer.joined().empty());
  EXPECT_EQ(Metric(router, "narwhal_config_reloads_total", {{"result", "rejected"}}), 2);
  EXPECT_EQ(Str(ReloadStatus(router), "last_trigger"), "admin");

  // Unparsable JSON: refused too, naming where.
  WriteFileAtomically(ConfigPath(router), "{\"model\": ");
  const pb::ReloadConfigResponse broken = ReloadConfig(router);
  EXPECT_EQ(broken.result(), "rejected");
  EXPECT_FALSE(broken.error().empty());
  EXPECT_EQ(Metric(router, "narwhal_config_generation"), 1);

  // The good file again applies (the refusals left the router reloadable).
  WriteFileAtomically(ConfigPath(router), config.dump(2));
  const pb::ReloadConfigResponse good = ReloadConfig(router);
  EXPECT_EQ(good.result(), "applied") << good.error();
  EXPECT_EQ(good.summary(), "no change");
}

TEST_F(LiveFleetTest, AKeyThatNeedsARestartIsRefusedByName) {
  // Listeners from the file (port 0), not from flags, so the file's
  // listen.http is the one in force.
  json config = FleetConfig(
      {{"p0", SimUrl("p0"), "prefill"}, {"d0", SimUrl("d0"), "decode"}},
      LiveOverrides(
          {{"listen",
            {{"http", "127.0.0.1:0"}, {"grpc", "127.0.0.1:0"}, {"admin", "127.0.0.1:0"}}}}));
  ServeOptions options;
  options.config = config;
  options.loopback_listeners = false;
  ServeProcess& router = Adopt(ServeProcess::Start(options));
  ASSERT_TRUE(WaitState(router, "d0", "serving")) << router.StderrTail();

  // The unchanged file reloads as "no change" (port 0 is not read as a
  // change to the bound port).
  pb::ReloadConfigResponse same = ReloadConfig(router);
  ASSERT_EQ(same.result(), "applied") << same.error();
  EXPECT_EQ(same.summary(), "no change");

  json moved = config;
  moved["listen"]["http"] = "127.0.0.1:1";
  moved["engines"].push_back(EngineEntry("d1", SimUrl("d1"), "decode"));
  moved["serving"]["max_attempts"] = 2;  // a live key: refused with the rest
  WriteFileAtomically(ConfigPath(router), moved.dump(2));
  router.Signal(SIGHUP);
  ASSERT_TRUE(WaitUntil(
      [&] {
        return Metric(router, "narwhal_config_reloads_total", {{"result", "rejected"}}) == 1;
      },
      absl::Seconds(10)))
      << router.StderrTail();
  std::vector<std::string> lines = LinesWith(router.Stderr(), "rejected, nothing changed");
  ASSERT_EQ(lines.size(), 1u) << router.Stderr();
  EXPECT_TRUE(absl::StrContains(lines[0], "needs a restart: listen.http")) << lines[0];
  EXPECT_FALSE(absl::StrContains(lines[0], "max_attempts")) << lines[0];

  pb::ReloadConfigResponse answer = ReloadConfig(router);
  EXPECT_EQ(answer.result(), "rejected");
  EXPECT_EQ(answer.generation(), 1);
  EXPECT_EQ(answer.error(), "config " + ConfigPath(router) + ": needs a restart: listen.http");
  EXPECT_TRUE(absl::StrContains(lines[0], answer.error())) << lines[0];

  // The model too, named with the listener.
  moved["model"] = "another/model";
  WriteFileAtomically(ConfigPath(router), moved.dump(2));
  answer = ReloadConfig(router);
  EXPECT_EQ(answer.result(), "rejected");
  EXPECT_TRUE(absl::StrContains(answer.error(), "needs a restart: "));
  EXPECT_TRUE(absl::StrContains(answer.error(), "model")) << answer.error();
  EXPECT_TRUE(absl::StrContains(answer.error(), "listen.http")) << answer.error();

  // Nothing changed: the fleet, the generation, the listener (it answers).
  EXPECT_EQ(State(router, "d1"), "");
  EXPECT_EQ(Metric(router, "narwhal_config_generation"), 1);
  EXPECT_EQ(Metric(router, "narwhal_config_reloads_total", {{"result", "rejected"}}), 3);
  EXPECT_EQ(Metric(router, "narwhal_config_reloads_total", {{"result", "applied"}}), 1);
  HttpCapture c = Send(router, kCompletions, Completion("same listener", 2, false));
  ASSERT_EQ(c.status, 200) << Describe(c);
  EXPECT_EQ(JournalRow(router, c)["fleet_generation"], 1);
}

// --------------------------------------------------- B22/B25 join via admin

TEST_F(LiveFleetTest, AnEngineFailingItsJoinCheckNeverServesAndAGoodOneDoes) {
  ServeProcess& router = StartRouter({"p0", "d0"}, LiveOverrides());
  ASSERT_TRUE(WaitState(router, "d0", "serving")) << router.StderrTail();
  absl::StatusOr<std::unique_ptr<SimProcess>> other_model =
      SimProcess::Start({"--engine-id", "dm", "--role", "decode", "--model", "another/model"});
  ASSERT_TRUE(other_model.ok()) << other_model.status();

  // Nothing listens at the first; the second serves another model.
  pb::Engine added;
  ASSERT_TRUE(AddEngine(router, "dx", "http://127.0.0.1:1", "decode", &added).ok());
  EXPECT_EQ(added.state(), "joining");
  EXPECT_EQ(added.source(), "admin");
  ASSERT_TRUE(AddEngine(router, "dm", (*other_model)->url(), "decode", &added).ok());
  EXPECT_EQ(added.state(), "joining");

  // Both fail their join checks, again and again (retried with backoff).
  ASSERT_TRUE(WaitUntil(
      [&] {
        return EventRows(router, "engine_join_failed", "dx").size() >= 2 &&
               EventRows(router, "engine_join_failed", "dm").size() >= 2;
      },
      absl::Seconds(15)))
      << router.StderrTail();
  const json dx_failed = EventRows(router, "engine_join_failed", "dx").front();
  EXPECT_EQ(Str(dx_failed, "source"), "admin") << dx_failed.dump();
  EXPECT_EQ(Str(dx_failed, "url"), "http://127.0.0.1:1") << dx_failed.dump();
  EXPECT_EQ(Str(dx_failed, "detail"),
            "GET /health: no response from 127.0.0.1:1: connection refused")
      << dx_failed.dump();
  // The retry is readmit_interval_s (0.2 s) times the failures in a row.
  EXPECT_EQ(Str(dx_failed, "cause"), "join check failed (1 in a row; next in 0.2 s)")
      << dx_failed.dump();
  const json dm_failed = EventRows(router, "engine_join_failed", "dm").front();
  EXPECT_EQ(Str(dm_failed, "detail"),
            absl::StrCat("model ", kModel, " is not served (engine serves: another/model)"))
      << dm_failed.dump();
  // WatchEvents carries them.
  const std::vector<pb::Event> watched = WatchUntil(router, [](const pb::Event& e) {
    return e.kind() == "engine_join_failed" && e.iid() == "dm";
  });
  ASSERT_FALSE(watched.empty());
  EXPECT_EQ(watched.back().kind(), "engine_join_failed");
  EXPECT_EQ(watched.back().source(), "admin");
  EXPECT_GE(Metric(router, "narwhal_membership_changes_total",
                   {{"source", "admin"}, {"change", "join_failed"}}),
            4);
  EXPECT_EQ(Metric(router, "narwhal_fleet_engines", {{"role", "decode"}, {"state", "joining"}}), 2);

  // Joining never blocks requests, and a joiner gets no client leg.
  EXPECT_EQ(DecodeEngines(router, 6), (std::map<std::string, int>{{"d0", 6}}));
  EXPECT_EQ(State(router, "dx"), "joining");
  EXPECT_EQ(State(router, "dm"), "joining");
  EXPECT_TRUE(SimRequests(**other_model).empty())
      << "an engine serving another model received an inference request";

  // A known iid: ALREADY_EXISTS; a file engine cannot be removed here.
  EXPECT_EQ(AddEngine(router, "dm", SimUrl("d1"), "decode").error_code(),
            grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_EQ(AddEngine(router, "d0", SimUrl("d1"), "decode").error_code(),
            grpc::StatusCode::ALREADY_EXISTS);
  const grpc::Status file_engine = RemoveEngine(router, "d0");
  EXPECT_EQ(file_engine.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_TRUE(absl::StrContains(file_engine.error_message(), "file"))
      << file_engine.error_message();
  EXPECT_EQ(RemoveEngine(router, "nope").error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(State(router, "d0"), "serving");

  // A good engine joins, then serves.
  ASSERT_TRUE(AddEngine(router, "d1", SimUrl("d1"), "decode").ok());
  ASSERT_TRUE(WaitState(router, "d1", "serving")) << router.StderrTail();
  EXPECT_EQ(Str(WaitEventRow(router, "engine_joined", "d1"), "source"), "admin");
  EXPECT_EQ(Metric(router, "narwhal_membership_changes_total",
                   {{"source", "admin"}, {"change", "joined"}}),
            1);
  ASSERT_TRUE(ServedBy(router, "d1")) << router.StderrTail();

  // The failing ones leave on request, at once (nothing runs on them).
  for (const char* iid : {"dx", "dm"}) {
    ASSERT_TRUE(RemoveEngine(router, iid).ok()) << iid;
    EXPECT_TRUE(WaitUntil([&] { return State(router, iid).empty(); }, absl::Seconds(5))) << iid;
  }
  EXPECT_TRUE(SimRequests(**other_model).empty());
}

// ------------------------------------------------ B21 identity and memory

TEST_F(LiveFleetTest, AnEngineThatLeavesAndReturnsResumesItsBreakerState) {
  const json config = FleetConfig({{"p0", SimUrl("p0"), "prefill"},
                                   {"d0", SimUrl("d0"), "decode"},
                                   {"d1", SimUrl("d1"), "decode"}},
                                  LiveOverrides());
  ServeProcess& router = AdoptStarted(config);
  ASSERT_TRUE(WaitState(router, "d1", "serving")) << router.StderrTail();
  {
    grpc::ClientContext context;
    Deadline(&context);
    pb::EjectEngineRequest eject;
    eject.set_iid("d1");
    eject.set_reason("GPU maintenance");
    pb::Engine engine;
    ASSERT_TRUE(Admin(router)->EjectEngine(&context, eject, &engine).ok());
    ASSERT_EQ(engine.state(), "ejected");
  }

  // d1 leaves the file...
  json without = config;
  without["engines"].erase(2);
  WriteFileAtomically(ConfigPath(router), without.dump(2));
  pb::ReloadConfigResponse answer = ReloadConfig(router);
  ASSERT_EQ(answer.result(), "applied") << answer.error();
  EXPECT_EQ(answer.generation(), 2);
  EXPECT_EQ(std::vector<std::string>(answer.left().begin(), answer.left().end()),
            std::vector<std::string>{"d1"});
  EXPECT_EQ(answer.summary(), "engines left d1");
  ASSERT_TRUE(WaitUntil([&] { return State(router, "d1").empty(); }, absl::Seconds(10)))
      << router.StderrTail();

  // ...and comes back with the same url within membership.remember_s: it
  // passes its join check, and is still the operator's ejected engine.
  WriteFileAtomically(ConfigPath(router), config.dump(2));
  answer = ReloadConfig(router);
  ASSERT_EQ(answer.result(), "applied") << answer.error();
  EXPECT_EQ(answer.generation(), 3);
  EXPECT_EQ(std::vector<std::string>(answer.joined().begin(), answer.joined().end()),
            std::vector<std::string>{"d1"});
  ASSERT_TRUE(WaitUntil([&] { return !EventRows(router, "engine_joined", "d1").empty(); },
                        absl::Seconds(10)))
      << router.StderrTail();
  ASSERT_TRUE(WaitState(router, "d1", "ejected")) << router.StderrTail();
  EXPECT_EQ(Engines(router).at("d1").last_ejection_cause(), "operator");
  EXPECT_EQ(DecodeEngines(router, 4), (std::map<std::string, int>{{"d0", 4}}));

  // The operator readmits it; then it serves.
  {
    grpc::ClientContext context;
    Deadline(&context, 20);
    pb::ReadmitEngineRequest readmit;
    readmit.set_iid("d1");
    pb::ReadmitEngineResponse response;
    ASSERT_TRUE(Admin(router)->ReadmitEngine(&context, readmit, &response).ok());
    EXPECT_TRUE(response.readmitted()) << response.detail();
  }
  ASSERT_TRUE(WaitState(router, "d1", "serving")) << router.StderrTail();
  ASSERT_TRUE(ServedBy(router, "d1")) << router.StderrTail();
}

TEST_F(LiveFleetTest, AFailureOfALegOnAnEngineThatLeftIsNotEvidenceAgainstItsSuccessor) {
  // d1 moves to a new url (B21: the old engine leaves, a new one joins with
  // a fresh breaker) while a stream on the old one stalls; the stall's
  // timeout is evidence against the old engine, which is gone, not against
  // the new d1.
  absl::StatusOr<std::unique_ptr<SimProcess>> successor = SimProcess::Start(
      {"--engine-id", "d1", "--role", "decode", "--model", kModel, "--token-interval-ms", "2"});
  ASSERT_TRUE(successor.ok()) << successor.status();
  const json config = FleetConfig({{"p0", SimUrl("p0"), "prefill"},
                                   {"d0", SimUrl("d0"), "decode"},
                                   {"d1", SimUrl("d1"), "decode"}},
                                  LiveOverrides({{"recovery", {{"eject_after", 1}}},
                                                 {"engine", {{"decode_read_timeout_s", 3}}}}));
  ServeProcess& router = AdoptStarted(config);
  ASSERT_TRUE(WaitState(router, "d1", "serving")) << router.StderrTail();
  {
    grpc::ClientContext context;
    Deadline(&context);
    pb::DrainEngineRequest drain;
    drain.set_iid("d0");
    pb::Engine engine;
    ASSERT_TRUE(Admin(router)->DrainEngine(&context, drain, &engine).ok());
  }
  SetFaults(
      "d1",
      json::array(
          {{{"kind", "stall_after_tokens"}, {"phase", "decode"}, {"tokens", 2}, {"times", 1}}}));
  BackgroundStream stream(*this, router, Completion("a stream that stalls", 20, true));
  ASSERT_TRUE(WaitDecodeTokens(Sim("d1"), 2)) << router.StderrTail();

  json moved = config;
  moved["engines"][2]["url"] = (*successor)->url();
  WriteFileAtomically(ConfigPath(router), moved.dump(2));
  const pb::ReloadConfigResponse answer = ReloadConfig(router);
  ASSERT_EQ(answer.result(), "applied") << answer.error();
  EXPECT_EQ(std::vector<std::string>(answer.changed().begin(), answer.changed().end()),
            std::vector<std::string>{"d1"});
  // The move came first: the stalled leg is still open.
  ASSERT_TRUE(WaitDecodeLegOpen(Sim("d1"), absl::ZeroDuration()));

  // The old leg fails on its own (engine.decode_read_timeout_s).
  HttpCapture& c = stream.Join();
  ASSERT_EQ(c.status, 200) << Describe(c);
  const json error = TerminalErrorEvent(c);
  ASSERT_TRUE(error.is_object()) << Describe(c);
  EXPECT_TRUE(absl::StartsWith(Str(error, "message"), "engine went silent between tokens"))
      << error.dump();
  JournalRow(router, c);

  ASSERT_TRUE(WaitState(router, "d1", "serving")) << router.StderrTail();
  const pb::Engine d1 = Engines(router).at("d1");
  EXPECT_EQ(d1.url(), (*successor)->url());
  for (const auto& [cls, streak] : d1.streak()) EXPECT_EQ(streak, 0) << cls;
  EXPECT_EQ(d1.last_ejection_cause(), "");
  ASSERT_TRUE(ServedBy(router, "d1")) << router.StderrTail();
}

// -------------------------------------------------------- B23/B25 leaving

TEST_F(LiveFleetTest, RemovingAnEngineLetsItsStreamFinishThenItIsGone) {
  ServeProcess& router = StartRouter({"p0", "d0"}, LiveOverrides());
  ASSERT_TRUE(WaitState(router, "d0", "serving")) << router.StderrTail();
  ASSERT_TRUE(AddEngine(router, "d1", SimUrl("d1"), "decode").ok());
  ASSERT_TRUE(WaitState(router, "d1", "serving")) << router.StderrTail();
  // Only d1 decodes now.
  {
    grpc::ClientContext context;
    Deadline(&context);
    pb::DrainEngineRequest drain;
    drain.set_iid("d0");
    pb::Engine engine;
    ASSERT_TRUE(Admin(router)->DrainEngine(&context, drain, &engine).ok());
  }
  // 20 tokens, 100 ms apart: about 2 s, well within the drain timeout.
  SetFaults(
      "d1",
      json::array(
          {{{"kind", "slow_tokens"}, {"phase", "decode"}, {"interval_ms", 100}, {"times", 1}}}));
  BackgroundStream stream(*this, router, Completion("a long stream", 20, true));
  ASSERT_TRUE(WaitDecodeTokens(Sim("d1"), 2)) << router.StderrTail();

  pb::Engine removed;
  ASSERT_TRUE(RemoveEngine(router, "d1", &removed).ok());
  EXPECT_EQ(removed.state(), "draining");
  EXPECT_EQ(removed.inflight_decode(), 1);
  const std::map<std::string, pb::Engine> during = Engines(router);
  ASSERT_EQ(during.count("d1"), 1u);
  EXPECT_EQ(during.at("d1").state(), "draining");
  EXPECT_EQ(during.at("d1").source(), "admin");
  EXPECT_EQ(Metric(router, "narwhal_fleet_engines", {{"role", "decode"}, {"state", "draining"}}),
            2);  // d0 drained by the operator, d1 leaving
  ASSERT_TRUE(WaitEventRow(router, "engine_left", "d1").is_object());

  HttpCapture& c = stream.Join();
  ASSERT_EQ(c.status, 200) << Describe(c);
  EXPECT_TRUE(c.saw_done()) << Describe(c);
  EXPECT_EQ(TokenEvents(c).size(), 20u) << Describe(c);
  EXPECT_TRUE(TerminalErrorEvent(c).is_null()) << Describe(c);
  const json row = JournalRow(router, c);
  EXPECT_EQ(row["terminal"], "completed") << row.dump();
  EXPECT_EQ(row["decode_iid"], "d1") << row.dump();

  // Then it is gone: from ListEngines and from its per-engine series.
  ASSERT_TRUE(WaitUntil([&] { return State(router, "d1").empty(); }, absl::Seconds(10)))
      << router.StderrTail();
  const std::vector<MetricSample> m = Metrics(router);
  for (const MetricSample& s : m) {
    if (s.labels.count("iid") == 1) {
      EXPECT_NE(s.labels.at("iid"), "d1") << s.name;
    }
  }
  EXPECT_EQ(
      MetricSum(m, "narwhal_membership_changes_total", {{"source", "admin"}, {"change", "left"}}),
      1);
  EXPECT_TRUE(absl::StrContains(router.Stderr(), "fleet: engine d1 is gone")) << router.Stderr();
  EXPECT_FALSE(absl::StrContains(router.Stderr(), "d1 (its last legs were cancelled)"));
}

TEST_F(LiveFleetTest, DrainTimeoutCutsAStreamAsEngineRemovedAndIsNoBreakerEvidence) {
  // One failure of a class would eject an engine: a leave counted as
  // evidence would show at once.
  ServeProcess& router =
      StartRouter({"p0", "d0"}, LiveOverrides({{"membership", {{"drain_timeout_s", 0.3}}},
                                               {"recovery", {{"eject_after", 1}}}}));
  ASSERT_TRUE(WaitState(router, "d0", "serving")) << router.StderrTail();
  ASSERT_TRUE(AddEngine(router, "d1", SimUrl("d1"), "decode").ok());
  ASSERT_TRUE(WaitState(router, "d1", "serving")) << router.StderrTail();
  {
    grpc::ClientContext context;
    Deadline(&context);
    pb::DrainEngineRequest drain;
    drain.set_iid("d0");
    pb::Engine engine;
    ASSERT_TRUE(Admin(router)->DrainEngine(&context, drain, &engine).ok());
  }
  // 100 tokens 200 ms apart: 20 s, far beyond the drain timeout.
  SetFaults(
      "d1",
      json::array(
          {{{"kind", "slow_tokens"}, {"phase", "decode"}, {"interval_ms", 200}, {"times", 1}}}));
  BackgroundStream stream(*this, router, Completion("a stream outlasting the drain", 100, true));
  ASSERT_TRUE(WaitDecodeTokens(Sim("d1"), 2)) << router.StderrTail();

  const absl::Time removed_at = absl::Now();
  ASSERT_TRUE(RemoveEngine(router, "d1").ok());
  // The same engine comes back at once (a restarted pod with its name) while
  // its old legs still drain: evidence from the old legs, if any, would land
  // on it.
  ASSERT_TRUE(AddEngine(router, "d1", SimUrl("d1"), "decode").ok());

  HttpCapture& c = stream.Join();
  const absl::Duration cut_after = absl::Now() - removed_at;
  EXPECT_LT(cut_after, absl::Seconds(5)) << "the stream was not cut at the drain timeout";
  ASSERT_EQ(c.status, 200) << Describe(c);
  EXPECT_FALSE(c.saw_done()) << Describe(c);
  EXPECT_GE(TokenEvents(c).size(), 2u) << Describe(c);
  EXPECT_LT(TokenEvents(c).size(), 100u) << Describe(c);
  const json error = TerminalErrorEvent(c);
  ASSERT_TRUE(error.is_object()) << Describe(c);
  EXPECT_TRUE(absl::StartsWith(Str(error, "message"), "engine removed from the fleet"))
      << error.dump();
  const json row = JournalRow(router, c);
  EXPECT_EQ(row["terminal"], "failed") << row.dump();
  EXPECT_TRUE(absl::StartsWith(Str(row, "error"), "engine removed from the fleet")) << row.dump();
  EXPECT_EQ(row["status"], error["code"]) << row.dump();
  ASSERT_EQ(row["attempt_failures"].size(), 1u) << row.dump();
  const json failure = row["attempt_failures"][0];
  EXPECT_EQ(failure["iid"], "d1") << row.dump();
  EXPECT_EQ(failure["phase"], "decode") << row.dump();
  EXPECT_EQ(failure["output_started"], true) << row.dump();
  // An engine fault (502), of no breaker class: not evidence.
  EXPECT_EQ(row["status"], 502) << row.dump();
  EXPECT_EQ(failure["class"], "none") << row.dump();
  EXPECT_TRUE(absl::StartsWith(Str(failure, "error"), "engine removed from the fleet"))
      << row.dump();
  EXPECT_TRUE(absl::StrContains(router.Stderr(),
                                "fleet: engine d1 left the fleet and its legs in flight outlasted "
                                "membership.drain_timeout_s: cancelling 1 legs"))
      << router.StderrTail();
  ASSERT_TRUE(WaitUntil(
      [&] { return absl::StrContains(router.Stderr(), "d1 (its last legs were cancelled)"); },
      absl::Seconds(5)))
      << router.StderrTail();

  // Not breaker evidence: the returned d1 joins and serves, no streak, never
  // ejected; no ejection anywhere.
  ASSERT_TRUE(WaitState(router, "d1", "serving")) << router.StderrTail();
  const pb::Engine d1 = Engines(router).at("d1");
  for (const auto& [cls, streak] : d1.streak()) EXPECT_EQ(streak, 0) << cls;
  EXPECT_EQ(d1.last_ejection_cause(), "");
  EXPECT_EQ(Metric(router, "narwhal_engine_ejections_total"), 0);
  EXPECT_EQ(Metric(router, "narwhal_engine_breaker_streak", {{"iid", "d1"}}), 0);
  EXPECT_TRUE(EventRows(router, "engine_ejected", "d1").empty());
  EXPECT_TRUE(EventRows(router, "engine_hold_started", "d1").empty());
  ASSERT_TRUE(ServedBy(router, "d1")) << router.StderrTail();
}

// ------------------------------------------------------------- B24 DNS

// Two decode engines on one port, on two loopback addresses: the members of
// one DNS group (the port is the group's).
struct TwoAddressEngines {
  std::unique_ptr<SimProcess> a;  // 127.0.0.2
  std::unique_ptr<SimProcess> b;  // 127.0.0.3
};

absl::StatusOr<TwoAddressEngines> StartTwoAddressEngines() {
  absl::Status last = absl::UnknownError("no attempt");
  for (int attempt = 0; attempt < 5; ++attempt) {
    TwoAddressEngines out;
    absl::StatusOr<std::unique_ptr<SimProcess>> a =
        SimProcess::Start({"--engine-id", "dns-a", "--role", "decode", "--model", kModel, "--host",
                           "127.0.0.2", "--token-interval-ms", "2"});
    if (!a.ok()) return a.status();
    const std::string port = std::to_string((*a)->port());
    absl::StatusOr<std::unique_ptr<SimProcess>> b =
        SimProcess::Start({"--engine-id", "dns-b", "--role", "decode", "--model", kModel, "--host",
                           "127.0.0.3", "--port", port, "--token-interval-ms", "2"});
    if (!b.ok()) {
      last = b.status();  // the port was taken on 127.0.0.3: another pair
      continue;
    }
    out.a = std::move(*a);
    out.b = std::move(*b);
    return out;
  }
  return last;
}

TEST_F(LiveFleetTest, ADnsGroupFollowsItsNameAndAFailedLookupChangesNothing) {
  absl::StatusOr<TwoAddressEngines> engines = StartTwoAddressEngines();
  ASSERT_TRUE(engines.ok()) << engines.status();
  const int port = engines->a->port();
  absl::StatusOr<std::unique_ptr<DnsmasqProcess>> dns =
      DnsmasqProcess::Start({{"decode.test", {"127.0.0.2", "127.0.0.3"}}});
  ASSERT_TRUE(dns.ok()) << dns.status();

  json config = FleetConfig({{"p0", SimUrl("p0"), "prefill"}},
                            LiveOverrides({{"discovery",
                                            {{"dns_servers", {(*dns)->server()}},
                                             {"dns_refresh_s", 0.5},
                                             {"dns_timeout_s", 0.5}}}}));
  config["engines"].push_back(
      {{"iid", "decode"}, {"dns", "decode.test"}, {"port", port}, {"role", "decode"}});
  ServeProcess& router = AdoptStarted(config);
  const std::string a = "decode-127.0.0.2-" + std::to_string(port);
  const std::string b = "decode-127.0.0.3-" + std::to_string(port);

  // Both addresses are members, joined through their checks, and serve.
  ASSERT_TRUE(WaitState(router, a, "serving")) << router.StderrTail();
  ASSERT_TRUE(WaitState(router, b, "serving")) << router.StderrTail();
  std::map<std::string, pb::Engine> listed = Engines(router);
  EXPECT_EQ(listed.at(a).source(), "dns:decode");
  EXPECT_EQ(listed.at(a).url(), "http://127.0.0.2:" + std::to_string(port));
  EXPECT_EQ(listed.at(b).url(), "http://127.0.0.3:" + std::to_string(port));
  EXPECT_EQ(listed.at(b).role(), "decode");
  EXPECT_EQ(listed.count("decode"), 0u);  // the group itself is no engine
  ASSERT_TRUE(WaitUntil([&] { return HttpGet(router.http_port(), "/ready").status == 200; },
                        absl::Seconds(10)));
  EXPECT_TRUE(ServedBy(router, a)) << router.StderrTail();
  EXPECT_TRUE(ServedBy(router, b)) << router.StderrTail();
  EXPECT_FALSE(SimRequests(*engines->b, "decode").empty());
  EXPECT_GT(
      Metric(router, "narwhal_discovery_lookups_total", {{"group", "decode"}, {"result", "ok"}}),
      0);
  EXPECT_EQ(Metric(router, "narwhal_membership_changes_total",
                   {{"source", "dns:decode"}, {"change", "joined"}}),
            2);

  // One address disappears from the name: its engine leaves.
  ASSERT_TRUE((*dns)->SetHosts({{"decode.test", {"127.0.0.2"}}}).ok());
  ASSERT_TRUE(WaitUntil([&] { return State(router, b).empty(); }, absl::Seconds(10)))
      << router.StderrTail();
  EXPECT_EQ(Str(WaitEventRow(router, "engine_left", b), "source"), "dns:decode");
  EXPECT_EQ(State(router, a), "serving");
  ASSERT_TRUE(engines->b->ClearRequests().ok());
  EXPECT_EQ(DecodeEngines(router, 3), (std::map<std::string, int>{{a, 3}}));
  EXPECT_TRUE(SimRequests(*engines->b, "decode").empty());

  // The resolver stops answering: lookups fail, members stay, one log line.
  const double failed_before = Metric(router, "narwhal_discovery_lookups_total",
                                      {{"group", "decode"}, {"result", "failed"}});
  const size_t log_before = router.Stderr().size();
  ASSERT_TRUE((*dns)->Stop().ok());
  ASSERT_TRUE(WaitUntil(
      [&] {
        return Metric(router, "narwhal_discovery_lookups_total",
                      {{"group", "decode"}, {"result", "failed"}}) >= failed_before + 3;
      },
      absl::Seconds(15)))
      << router.StderrTail();
  EXPECT_EQ(State(router, a), "serving");
  // One line for the episode: logged after the stop, or already by a slow
  // lookup just before it (then none after it, and no recovery since).
  const std::string since_stop = router.Stderr().substr(log_before);
  const int failed_lines = Count(since_stop, "dns group decode (decode.test): lookup failed");
  EXPECT_LE(failed_lines, 1) << since_stop;
  EXPECT_EQ(Count(since_stop, "dns group decode (decode.test): lookups answer again"), 0)
      << since_stop;
  const std::string all = router.Stderr();
  const size_t last_failed = all.rfind("dns group decode (decode.test): lookup failed");
  ASSERT_NE(last_failed, std::string::npos) << all;
  const size_t last_answer = all.rfind("dns group decode (decode.test): lookups answer again");
  EXPECT_TRUE(last_answer == std::string::npos || last_answer < last_failed) << all;
  EXPECT_TRUE(EventRows(router, "engine_left", a).empty());
  EXPECT_EQ(DecodeEngines(router, 2), (std::map<std::string, int>{{a, 2}}));
}

}  // namespace
}  // namespace narwhal::testing
