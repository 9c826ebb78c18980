// The membership driver: on its own thread, engines join and leave the
// running router every few seconds while the load and the chaos run (the
// live-fleet proof of SPEC §13). It owns three extra narwhal-sim engines
// (one prefill, one decode, one both) that chaos never touches, and moves
// them in and out of the fleet with the admin API's AddEngine and
// RemoveEngine (source admin). A removed engine is drained: its legs in
// flight finish within membership.drain_timeout_s, which is longer than any
// soak request, so a membership change must cost no client an error — the
// contract check counts any outcome that names a removed engine as a
// violation.
#ifndef NARWHAL_TESTS_SOAK_MEMBERSHIP_H_
#define NARWHAL_TESTS_SOAK_MEMBERSHIP_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tests/soak/fleet.h"

namespace narwhal::soak {

struct MembershipStats {
  int added = 0;          // AddEngine calls accepted
  int removed = 0;        // RemoveEngine calls accepted
  int joined = 0;         // added engines seen serving afterwards
  std::vector<std::string> refused;  // calls the router refused, with why
};

class MembershipDriver {
 public:
  // `states` returns each engine's last known router state (ListEngines).
  using StatesFn = std::function<std::map<std::string, std::string>()>;
  MembershipDriver(std::vector<SoakEngine> engines, const std::string& admin_target,
                   uint64_t seed, StatesFn states);
  ~MembershipDriver();

  void Start();
  // Stops the changes and removes every engine it added (joins the thread).
  void Stop();

  const MembershipStats& stats() const { return stats_; }

 private:
  class Admin;
  void Loop();
  // Adds or removes engine `i`; false when the router refused.
  bool Flip(size_t i);

  std::vector<SoakEngine> engines_;
  std::vector<bool> in_fleet_;
  std::unique_ptr<Admin> admin_;
  std::mt19937_64 rng_;
  StatesFn states_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  MembershipStats stats_;
};

// Starts the driver's three engines (iids m-p0, m-d0, m-b0).
absl::StatusOr<std::vector<SoakEngine>> StartChurnEngines(const SoakOptions& options,
                                                          std::mt19937_64& rng);

}  // namespace narwhal::soak

#endif  // NARWHAL_TESTS_SOAK_MEMBERSHIP_H_
