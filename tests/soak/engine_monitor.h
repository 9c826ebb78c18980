// Watches the router's placement through the admin API (ListEngines every
// 250 ms on its own thread): each engine's state over time, the
// readmissions seen (an engine out of placement that returns to
// "serving"), and a wait for the whole fleet to be serving.
#ifndef NARWHAL_TESTS_SOAK_ENGINE_MONITOR_H_
#define NARWHAL_TESTS_SOAK_ENGINE_MONITOR_H_

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"

namespace narwhal::soak {

struct EngineMonitorStats {
  // Returns to "serving" after a poll saw the engine out of placement.
  std::map<std::string, int> readmissions;
  // Polls that saw the engine in each non-serving state.
  std::map<std::string, int> out_polls;  // "held", "quarantined", "ejected", ...
  int polls = 0;
  int failed_polls = 0;
};

// One engine's return (SIGCONT or restart) at `back_at`, judged up to
// `until` (its next disruption, or the end of the monitoring).
struct Recovery {
  std::string iid;
  absl::Time back_at;
  absl::Time until;
};

// Readmission delay of one recovery: from the engine's return to the first
// poll that saw it serving.
struct RecoveryLatency {
  Recovery recovery;
  bool readmitted = false;      // seen serving before `until`
  bool left_placement = false;  // out of placement at some poll of its outage
  absl::Duration latency;
};

class EngineMonitor {
 public:
  explicit EngineMonitor(const std::string& admin_target);
  ~EngineMonitor();

  void Start();
  void Stop();

  // Polls until every engine is "serving" (at most `timeout`); the states
  // seen last, "" when all serve.
  std::string WaitAllServing(absl::Duration timeout);

  // Each engine's last known state (iid -> "serving", "held", ...),
  // engines that left the fleet included.
  std::map<std::string, std::string> LastStates() const;
  // The engines of the last successful poll only, with their states.
  std::map<std::string, std::string> CurrentStates() const;

  EngineMonitorStats stats() const;
  // For each recovery: when that engine was next seen serving.
  std::vector<RecoveryLatency> Latencies(const std::vector<Recovery>& recoveries) const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace narwhal::soak

#endif  // NARWHAL_TESTS_SOAK_ENGINE_MONITOR_H_
