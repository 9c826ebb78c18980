// The chaos driver: on its own thread, injects every narwhal-sim fault kind
// (round-robin over shuffled rounds, random parameters, random engines) and
// freezes (SIGSTOP, later SIGCONT), kills (SIGKILL or SIGTERM, later a
// restart on the same port) engines, at most two disrupted at a time.
//
// Faults go only to engines in placement (as the router's admin API last
// reported it): an engine out of placement gets no client traffic, so rules
// posted to it would only ever fail its readmission probes and keep it out
// for as long as they last. For the same reason an engine seen held or
// ejected has its pending rules cleared, so that its readmission depends on
// the engine, not on leftover rules.
#ifndef NARWHAL_TESTS_SOAK_CHAOS_H_
#define NARWHAL_TESTS_SOAK_CHAOS_H_

#include <atomic>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "tests/soak/fleet.h"

namespace narwhal::soak {

struct ChaosStats {
  std::map<std::string, int> faults;   // rules posted, by kind
  std::map<std::string, int> signals;  // SIGSTOP, SIGCONT, SIGKILL, SIGTERM, restart
  int fault_posts_failed = 0;
  // Fault books cleared because their engine left placement.
  int books_cleared = 0;
  // Engines that were frozen or killed, and that came back (resumed or
  // restarted), and when.
  std::vector<std::pair<std::string, absl::Time>> disruptions;
  std::vector<std::pair<std::string, absl::Time>> recoveries;
  // Engines that exited on their own, restarts that failed, unclean exits
  // on SIGTERM.
  std::vector<std::string> problems;
};

class ChaosDriver {
 public:
  // `placement` returns each engine's last known router state.
  using PlacementFn = std::function<std::map<std::string, std::string>()>;
  ChaosDriver(std::vector<SoakEngine>* engines, uint64_t seed, PlacementFn placement);
  ~ChaosDriver();

  void Start();
  void Stop();  // joins the thread
  // After Stop(): resumes frozen engines, restarts dead ones, clears every
  // fault book.
  absl::Status Restore();
  // Looks for engines that exited without being told to (also after Stop).
  void CheckExits();

  const ChaosStats& stats() const { return stats_; }

 private:
  void Loop();
  void BringBack(absl::Time now);
  void InjectFault();
  void Disrupt(absl::Time now);
  int Disrupted() const;
  SoakEngine* PickUp(bool (*eligible)(const SoakEngine&), bool serving_only);
  void ClearBooksOutOfPlacement();

  std::vector<SoakEngine>* engines_;
  std::mt19937_64 rng_;
  PlacementFn placement_;
  std::map<std::string, std::string> states_;  // from placement_, refreshed each tick
  std::atomic<bool> stop_{false};
  std::thread thread_;
  ChaosStats stats_;
  std::vector<std::string> kind_round_;
  std::vector<std::string> action_round_;
};

}  // namespace narwhal::soak

#endif  // NARWHAL_TESTS_SOAK_CHAOS_H_
