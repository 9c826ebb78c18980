// The figures of a soak run and their printed summary.
#ifndef NARWHAL_TESTS_SOAK_REPORT_H_
#define NARWHAL_TESTS_SOAK_REPORT_H_

#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "tests/soak/chaos.h"
#include "tests/soak/contract.h"
#include "tests/soak/engine_monitor.h"
#include "tests/soak/membership.h"

namespace narwhal::soak {

struct SoakFigures {
  uint64_t seed = 0;
  int seconds = 0;
  int streams = 0;
  absl::Duration wall;
  ContractReport contract;
  ChaosStats chaos;
  EngineMonitorStats monitor;
  std::vector<RecoveryLatency> latencies;
  // Engines that joined and left during the run, and the requests that
  // failed because of it (must be none).
  MembershipStats membership;
  int membership_errors = 0;
  // narwhal-serve's resident memory: medians over the window that ends the
  // warm-up and over the last window of the load; peak; idle before the
  // load and after the quiet period.
  long rss_warm_kb = 0;
  long rss_end_kb = 0;
  long rss_peak_kb = 0;
  long rss_idle_before_kb = 0;
  long rss_idle_after_kb = 0;
  int threads_base = 0;
  int threads_end = 0;
  std::string thread_names_base;
  std::string thread_names_end;
  int fds_base = 0;
  int fds_end = 0;
  // From the restore of every engine to all of them serving.
  absl::Duration readmit_all;
  // From /metrics after the quiet period.
  double readmissions_metric = 0;
  double ejections_metric = 0;
  double probes_metric = 0;
  // Every failed check, contract violations aside.
  std::vector<std::string> failures;
};

double RssGrowth(const SoakFigures& f);
void PrintReport(const SoakFigures& f, std::ostream& out);

}  // namespace narwhal::soak

#endif  // NARWHAL_TESTS_SOAK_REPORT_H_
