#include "tests/soak/report.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace narwhal::soak {
namespace {

constexpr size_t kMaxViolationsShown = 40;

std::string Mb(long kb) { return absl::StrFormat("%.1f MB", static_cast<double>(kb) / 1024.0); }

std::string Counts(const std::map<std::string, int>& counts) {
  std::vector<std::string> parts;
  for (const auto& [name, n] : counts) parts.push_back(absl::StrCat(name, "=", n));
  return absl::StrJoin(parts, " ");
}

int Total(const std::map<std::string, int>& counts) {
  int n = 0;
  for (const auto& [name, c] : counts) n += c;
  return n;
}

}  // namespace

double RssGrowth(const SoakFigures& f) {
  if (f.rss_warm_kb <= 0) return 0;
  return static_cast<double>(f.rss_end_kb - f.rss_warm_kb) / static_cast<double>(f.rss_warm_kb);
}

void PrintReport(const SoakFigures& f, std::ostream& out) {
  const ContractReport& c = f.contract;
  out << "==== narwhal chaos soak: " << f.seconds << " s, " << f.streams
      << " streams, seed " << f.seed << ", wall " << absl::FormatDuration(absl::Trunc(f.wall, absl::Seconds(1)))
      << " ====\n";
  out << "requests: " << c.requests << " (" << c.aborted << " aborted by their client: "
      << c.aborted_cancelled << " journaled cancelled, " << c.aborted_unseen
      << " went away within " << absl::FormatDuration(kEarlyAbort) << " (gRPC: "
      << absl::FormatDuration(kGrpcEarlyAbort) << ") before the router saw them)\n";
  out << "outcomes:\n";
  for (const auto& [label, n] : c.outcomes) out << "  " << label << ": " << n << "\n";
  out << "journal: " << c.journal_rows << " terminal rows, " << c.matched
      << " requests matched exactly one row; terminals: " << Counts(c.terminals)
      << "; refusals counted by refusals_suppressed rows instead: " << c.suppressed_rows << "\n";
  out << "text repaired with U+FFFD (invalid_text): " << c.repaired_text << " requests\n";
  out << "faults injected: " << Total(f.chaos.faults) << " in "
      << f.chaos.faults.size() << " kinds: " << Counts(f.chaos.faults)
      << (f.chaos.fault_posts_failed ? absl::StrCat(" (", f.chaos.fault_posts_failed,
                                                     " posts failed)")
                                     : std::string())
      << "\n";
  out << "signals: " << Counts(f.chaos.signals) << "\n";
  out << "fault books cleared as their engine left placement: " << f.chaos.books_cleared << "\n";
  out << "membership: " << f.membership.added << " engines added (" << f.membership.joined
      << " seen serving after their join checks), " << f.membership.removed
      << " removed (drained); requests failed because an engine left: " << f.membership_errors
      << "\n";
  int readmitted = 0, left = 0, open = 0;
  std::vector<absl::Duration> took;
  for (const RecoveryLatency& l : f.latencies) {
    if (!l.left_placement) continue;
    ++left;
    if (l.readmitted) {
      ++readmitted;
      took.push_back(l.latency);
    } else {
      ++open;
    }
  }
  std::sort(took.begin(), took.end());
  const absl::Duration median = took.empty() ? absl::ZeroDuration() : took[took.size() / 2];
  const absl::Duration worst = took.empty() ? absl::ZeroDuration() : took.back();
  out << "readmissions: " << Total(f.monitor.readmissions) << " seen by ListEngines ("
      << Counts(f.monitor.readmissions) << "), narwhal_engine_readmissions_total "
      << f.readmissions_metric << ", ejections " << f.ejections_metric << ", probes "
      << f.probes_metric << "\n";
  auto ms = [](absl::Duration d) {
    return absl::FormatDuration(absl::Trunc(d, absl::Milliseconds(10)));
  };
  out << "recoveries: " << f.latencies.size() << " engines came back; " << left
      << " had left placement: " << readmitted << " seen serving again (median " << ms(median)
      << ", slowest " << ms(worst) << "), " << open
      << " disrupted again first; polls out of placement: " << Counts(f.monitor.out_polls)
      << "\n";
  out << "after the chaos: every engine serving "
      << absl::FormatDuration(absl::Trunc(f.readmit_all, absl::Milliseconds(10)))
      << " after the fleet was restored (under load)\n";
  out << absl::StrFormat("rss: warm-up %s -> end %s (%+.1f%%), peak %s; idle %s before, %s after\n",
                         Mb(f.rss_warm_kb), Mb(f.rss_end_kb), 100 * RssGrowth(f),
                         Mb(f.rss_peak_kb), Mb(f.rss_idle_before_kb), Mb(f.rss_idle_after_kb));
  out << "threads: baseline " << f.threads_base << " -> end " << f.threads_end
      << "; fds: baseline " << f.fds_base << " -> end " << f.fds_end << "\n";
  out << "threads by name: baseline " << f.thread_names_base << "\n";
  out << "threads by name: end      " << f.thread_names_end << "\n";
  const size_t problems = c.violations.size() + f.failures.size();
  out << "checks: " << (problems == 0 ? "all passed" : absl::StrCat(problems, " FAILED")) << "\n";
  for (const std::string& note : c.notes) out << "NOTE: " << note << "\n";
  for (const std::string& failure : f.failures) out << "FAIL: " << failure << "\n";
  for (size_t i = 0; i < c.violations.size() && i < kMaxViolationsShown; ++i) {
    out << "FAIL: contract: " << c.violations[i] << "\n";
  }
  if (c.violations.size() > kMaxViolationsShown) {
    out << "FAIL: ... and " << c.violations.size() - kMaxViolationsShown
        << " more contract violations\n";
  }
}

}  // namespace narwhal::soak
