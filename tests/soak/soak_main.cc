// narwhal_soak: the chaos soak. narwhal-serve over six narwhal-sim engines,
// `--streams` concurrent HTTP and gRPC clients for `--seconds`, while the
// chaos driver injects every sim fault kind and freezes, kills and restarts
// engines, and clients abort at random. Then, after a quiet period, checks:
//   - every request ended exactly once with an allowed outcome and one
//     matching journal row (tests/soak/contract.h);
//   - no reservation leak: every narwhal_engine_inflight series and
//     narwhal_inflight back to 0;
//   - narwhal-serve's RSS grew < 10% from the end of the warm-up to the end
//     of the load (medians over equal windows under the same load);
//   - threads and open descriptors back to their pre-load baseline (within
//     the tolerances below);
//   - zero crashes: narwhal-serve ran throughout and exits 0 on SIGTERM; no
//     engine exited unless the driver killed it;
//   - engines that recover are readmitted: during the chaos, an engine that
//     left placement and came back (SIGCONT, restart) is seen "serving" by
//     ListEngines within kReadmitBound unless disrupted again first; when
//     the chaos stops, every engine is serving within kReadmitTimeout.
//   - every fault kind and every signal was used.
// Prints the figures; exits 0 when every check passed, 1 otherwise.
#include <fcntl.h>
#include <unistd.h>

#include <iostream>
#include <random>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "tests/e2e/e2e_util.h"
#include "tests/fakes/serve_process.h"
#include "tests/soak/chaos.h"
#include "tests/soak/engine_monitor.h"
#include "tests/soak/fault_menu.h"
#include "tests/soak/fleet.h"
#include "tests/soak/load.h"
#include "tests/soak/membership.h"
#include "tests/soak/proc_stats.h"
#include "tests/soak/report.h"
#include "tests/soak/soak_options.h"

namespace narwhal::soak {
namespace {

using testing::ServeProcess;

// Tolerances. Threads: the router's loops and workers are fixed, and so are
// gRPC's, except its default executor, which starts threads on demand up
// to 2 per core and keeps them ("default-executo"): it may grow to that cap,
// plus 1 for a thread caught while starting or ending. Descriptors: idle pooled engine connections close after 4 s, but health
// and readmission probes may hold one per engine (6) at the moment of the
// reading; allow 8.
constexpr int kThreadTolerance = 1;
constexpr int kFdTolerance = 8;
constexpr double kMaxRssGrowth = 0.10;
// Quiet-period bounds: readmission of every engine (probes every 0.5 s,
// backing off to at most 5 s after failures), journal and gauges settling,
// pooled connections closing.
constexpr absl::Duration kReadmitTimeout = absl::Seconds(30);
constexpr absl::Duration kSettleTimeout = absl::Seconds(30);
// During the chaos, an engine that came back and then stayed up is seen
// serving again within this bound (its pending faults are cleared once it
// is out of placement, so this is the probe cadence, the failure back-off
// of at most 10 readmission intervals, and a 2-core machine's slack).
constexpr absl::Duration kReadmitBound = absl::Seconds(20);

// Each recovery, judged up to the engine's next disruption or `end`.
std::vector<Recovery> Recoveries(const ChaosStats& chaos, absl::Time end) {
  std::vector<Recovery> out;
  for (const auto& [iid, back_at] : chaos.recoveries) {
    Recovery r{iid, back_at, end};
    for (const auto& [other, at] : chaos.disruptions) {
      if (other == iid && at > back_at && at < r.until) r.until = at;
    }
    out.push_back(r);
  }
  return out;
}

int ThreadAllowance(const std::map<std::string, int>& base) {
  const int cap = 2 * static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  auto it = base.find("default-executo");
  return std::max(0, cap - (it == base.end() ? 0 : it->second)) + kThreadTolerance;
}

// Sends a few requests through every door and gRPC channel, so that the
// baseline counts the connections a loaded router keeps.
void WarmUp(LoadGenerator& load, const SoakOptions& options,
            std::vector<RequestRecord>* records) {
  std::mt19937_64 rng(options.seed + 17);
  for (int i = 0; i < 8; ++i) {
    RequestPlan plan = load.Plan(rng, -1, static_cast<uint64_t>(i));
    plan.door = i < 4 ? Door::kHttp : Door::kGrpc;
    plan.stream = i % 2 == 0;
    plan.channel = i % 4;
    plan.abort_after = absl::InfiniteDuration();
    records->push_back(load.RunOne(plan));
  }
}

// Polls /metrics until no in-flight gauge is above 0; the series that are
// not, empty when none.
std::string WaitInflightZero(int http_port, absl::Duration timeout) {
  std::string stuck = "no /metrics answer";
  testing::WaitUntil(
      [&] {
        testing::HttpResult r = testing::HttpGet(http_port, "/metrics");
        if (r.status != 200) return false;
        stuck.clear();
        for (const testing::MetricSample& s : testing::ParseMetrics(r.body)) {
          if ((s.name == "narwhal_engine_inflight" || s.name == "narwhal_inflight") &&
              s.value != 0) {
            absl::StrAppend(&stuck, s.name, "{", s.labels.count("iid") ? s.labels.at("iid") : "",
                            ",", s.labels.count("phase") ? s.labels.at("phase") : "",
                            "}=", s.value, " ");
          }
        }
        return stuck.empty();
      },
      timeout, absl::Milliseconds(200));
  return stuck;
}

int Run(const SoakOptions& options) {
  const absl::Time run_start = absl::Now();
  SoakFigures f;
  f.seed = options.seed;
  f.seconds = options.seconds;
  f.streams = options.streams;
  std::cout << "soak: seed " << options.seed << " (rerun with --seed " << options.seed
            << "), " << options.seconds << " s, " << options.streams << " streams" << std::endl;

  absl::StatusOr<std::string> scratch = testing::MakeScratchDir("narwhal-soak-");
  if (!scratch.ok()) {
    std::cout << "FAIL: " << scratch.status() << std::endl;
    return 1;
  }
  // The engines inherit stderr; their event logs go to a file.
  const std::string engine_log = *scratch + "/engines.log";
  const int log_fd = open(engine_log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log_fd >= 0) {
    dup2(log_fd, STDERR_FILENO);
    close(log_fd);
  }
  std::cout << "soak: engine logs in " << engine_log << std::endl;

  std::mt19937_64 rng(options.seed);
  absl::StatusOr<std::vector<SoakEngine>> fleet = StartFleet(options, rng);
  if (!fleet.ok()) {
    std::cout << "FAIL: " << fleet.status() << std::endl;
    return 1;
  }
  // The engines that join and leave during the run, on a generator of
  // their own so that the fleet's and chaos's choices replay as before.
  std::mt19937_64 churn_rng(options.seed + 1);
  absl::StatusOr<std::vector<SoakEngine>> churn = StartChurnEngines(options, churn_rng);
  if (!churn.ok()) {
    std::cout << "FAIL: " << churn.status() << std::endl;
    return 1;
  }
  testing::ServeOptions serve_options;
  serve_options.config = SoakFleetConfig(*fleet, options.streams);
  absl::StatusOr<std::unique_ptr<ServeProcess>> started = ServeProcess::Start(serve_options);
  if (!started.ok()) {
    std::cout << "FAIL: cannot start narwhal-serve: " << started.status() << std::endl;
    return 1;
  }
  ServeProcess& serve = **started;
  std::cout << "soak: " << serve.ready_line() << "; config, journal and log in "
            << serve.scratch_dir() << std::endl;

  EngineMonitor monitor(serve.admin_address());
  if (std::string out = monitor.WaitAllServing(absl::Seconds(30)); !out.empty()) {
    f.failures.push_back(absl::StrCat("fleet not serving at start: ", out));
  }
  LoadGenerator load(options, serve.http_port(), serve.grpc_target());
  std::vector<RequestRecord> records;
  WarmUp(load, options, &records);
  // Idle long enough for pooled engine connections to close (4 s).
  absl::SleepFor(absl::Seconds(6));
  const ProcStats base = ReadProcStats(serve.pid());
  const std::map<std::string, int> base_threads = ThreadNames(serve.pid());
  const int thread_allowance = ThreadAllowance(base_threads);
  f.threads_base = base.threads;
  f.fds_base = base.fds;
  f.rss_idle_before_kb = base.rss_kb;
  std::cout << "soak: baseline threads=" << base.threads << " fds=" << base.fds
            << " rss=" << base.rss_kb << " kB" << std::endl;

  // The loaded, chaotic part.
  ChaosDriver chaos(&*fleet, options.seed, [&monitor] { return monitor.LastStates(); });
  MembershipDriver membership(std::move(*churn), serve.admin_address(), options.seed,
                              [&monitor] { return monitor.CurrentStates(); });
  std::vector<ProcSample> samples;
  const absl::Time t0 = absl::Now();
  monitor.Start();
  chaos.Start();
  membership.Start();
  load.Start();
  bool router_died = false;
  for (int s = 1; s <= options.seconds; ++s) {
    absl::SleepFor(t0 + absl::Seconds(s) - absl::Now());
    const ProcStats now = ReadProcStats(serve.pid());
    samples.push_back({absl::Now() - t0, now});
    if (!now.alive) {
      router_died = true;
      break;
    }
    if (s % 10 == 0) {
      std::cout << "soak: t=" << s << "s requests=" << load.finished()
                << " rss=" << now.rss_kb << " kB threads=" << now.threads << " fds=" << now.fds
                << std::endl;
    }
  }
  // Chaos off, every engine back and fault-free: under the same load, each
  // must be readmitted.
  chaos.Stop();
  // The engines that joined leave again (drained), so the fleet is the six
  // engines it started with.
  membership.Stop();
  f.membership = membership.stats();
  if (absl::Status s = chaos.Restore(); !s.ok()) {
    f.failures.push_back(absl::StrCat("engines not restored: ", s.message()));
  }
  if (!router_died) {
    const absl::Time restored = absl::Now();
    const std::string out = monitor.WaitAllServing(kReadmitTimeout);
    f.readmit_all = absl::Now() - restored;
    if (!out.empty()) {
      f.failures.push_back(absl::StrCat("engines not readmitted within ",
                                        absl::FormatDuration(kReadmitTimeout), ": ", out));
    }
  }
  load.Stop();
  monitor.Stop();
  const absl::Time monitor_end = absl::Now();
  f.monitor = monitor.stats();
  for (RequestRecord& r : load.TakeRecords()) records.push_back(std::move(r));
  const absl::Duration load_end = absl::Now() - t0;
  std::cout << "soak: load stopped after "
            << absl::FormatDuration(absl::Trunc(load_end, absl::Seconds(1))) << ", "
            << records.size() << " requests; quiet period" << std::endl;

  if (router_died) {
    f.failures.push_back("narwhal-serve died during the run (a crash)");
  } else {
    // No reservation leak.
    if (std::string stuck = WaitInflightZero(serve.http_port(), kSettleTimeout); !stuck.empty()) {
      f.failures.push_back(absl::StrCat("in-flight gauges not back to 0: ", stuck));
    }
    // Threads and descriptors back to the baseline.
    ProcStats end;
    testing::WaitUntil(
        [&] {
          end = ReadProcStats(serve.pid());
          return end.threads <= f.threads_base + thread_allowance &&
                 end.fds <= f.fds_base + kFdTolerance;
        },
        kSettleTimeout, absl::Milliseconds(500));
    f.threads_end = end.threads;
    f.fds_end = end.fds;
    f.rss_idle_after_kb = end.rss_kb;
    f.thread_names_base = FormatThreadNames(base_threads);
    f.thread_names_end = FormatThreadNames(ThreadNames(serve.pid()));
    if (end.threads > f.threads_base + thread_allowance) {
      f.failures.push_back(absl::StrCat("threads ", end.threads, " vs baseline ", f.threads_base,
                                        " (allowed +", thread_allowance, ")"));
    }
    if (end.fds > f.fds_base + kFdTolerance) {
      f.failures.push_back(absl::StrCat("fds ", end.fds, " vs baseline ", f.fds_base));
    }
    const std::vector<testing::MetricSample> metrics =
        testing::ParseMetrics(testing::HttpGet(serve.http_port(), "/metrics").body);
    f.readmissions_metric = testing::MetricSum(metrics, "narwhal_engine_readmissions_total");
    f.ejections_metric = testing::MetricSum(metrics, "narwhal_engine_ejections_total");
    f.probes_metric = testing::MetricSum(metrics, "narwhal_engine_probes_total");
  }

  // RSS: the window that ends the warm-up against the last window of load.
  const absl::Duration window = absl::Seconds(options.rss_window_s);
  const absl::Duration warm = absl::Seconds(options.warmup_s);
  const absl::Duration end = absl::Seconds(options.seconds);
  f.rss_warm_kb = MedianRssKb(samples, warm - window, warm);
  f.rss_end_kb = MedianRssKb(samples, end - window, end);
  f.rss_peak_kb = PeakRssKb(samples);
  if (!router_died && RssGrowth(f) >= kMaxRssGrowth) {
    f.failures.push_back(absl::StrCat("RSS grew ", static_cast<int>(100 * RssGrowth(f)),
                                      "% after warm-up (limit 10%)"));
  }

  // Zero crashes: the router exits 0 on SIGTERM (its journal then complete);
  // no engine exited on its own.
  const std::optional<int> exit_code = serve.Stop(absl::Seconds(30));
  if (!router_died && exit_code != std::optional<int>(0)) {
    f.failures.push_back(absl::StrCat("narwhal-serve exit on SIGTERM: ",
                                      exit_code ? absl::StrCat(*exit_code) : "still running"));
  }
  chaos.CheckExits();
  f.chaos = chaos.stats();
  for (const std::string& p : f.chaos.problems) f.failures.push_back(p);
  f.latencies = monitor.Latencies(Recoveries(f.chaos, monitor_end));
  for (const RecoveryLatency& l : f.latencies) {
    if (!l.left_placement) continue;
    const Recovery& r = l.recovery;
    if (l.readmitted ? l.latency > kReadmitBound : r.until - r.back_at >= kReadmitBound) {
      f.failures.push_back(absl::StrCat(
          "engine ", r.iid, " back at +", absl::FormatDuration(absl::Trunc(r.back_at - t0, absl::Milliseconds(100))),
          " was not readmitted within ", absl::FormatDuration(kReadmitBound),
          l.readmitted ? absl::StrCat(" (took ", absl::FormatDuration(l.latency), ")") : ""));
    }
  }
  for (const char* kind : {"SIGSTOP", "SIGCONT", "SIGKILL", "SIGTERM", "restart"}) {
    if (f.chaos.signals[kind] == 0) f.failures.push_back(absl::StrCat("no ", kind, " was sent"));
  }
  if (f.chaos.faults.size() < AllFaultKinds().size()) {
    f.failures.push_back(absl::StrCat("only ", f.chaos.faults.size(), " of ",
                                      AllFaultKinds().size(), " fault kinds injected"));
  }

  f.contract = CheckContract(records, serve.TerminalRows(), SuppressedRefusals(serve.EventRows()));
  // Membership changes cost no client anything: every leaving engine was
  // drained within membership.drain_timeout_s, longer than any request.
  for (const RequestRecord& r : records) {
    if (absl::StrContains(r.error_message, "removed from the fleet")) ++f.membership_errors;
  }
  if (f.membership_errors > 0) {
    f.failures.push_back(absl::StrCat(f.membership_errors,
                                      " requests failed because an engine left the fleet"));
  }
  for (const std::string& refused : f.membership.refused) {
    f.failures.push_back(absl::StrCat("membership change refused: ", refused));
  }
  if (f.membership.added == 0 || f.membership.joined == 0) {
    f.failures.push_back(absl::StrCat("membership: ", f.membership.added, " engines added, ",
                                      f.membership.joined, " seen serving (expected some)"));
  }
  f.wall = absl::Now() - run_start;
  PrintReport(f, std::cout);
  const bool ok = f.failures.empty() && f.contract.violations.empty();
  if (!ok || options.keep) {
    serve.keep_scratch(true);
    std::cout << "soak: kept " << serve.scratch_dir() << " (fleet.json, journal.jsonl, stderr.log)"
              << " and " << *scratch << std::endl;
  }
  std::cout << (ok ? "soak: PASSED" : "soak: FAILED") << std::endl;
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace narwhal::soak

int main(int argc, char** argv) {
  absl::StatusOr<narwhal::soak::SoakOptions> options =
      narwhal::soak::ParseSoakOptions(argc, argv);
  if (!options.ok()) {
    std::cerr << options.status().message() << "\n";
    return 2;
  }
  return narwhal::soak::Run(*options);
}
