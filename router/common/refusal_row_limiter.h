// RefusalRowLimiter: how many journal rows a flood of refusals may write.
//
// SPEC §9 promises one terminal row per client request. A client that
// floods the router with requests it refuses at once — over
// serving.max_inflight (429), unauthenticated, malformed framing — would
// otherwise turn each cheap refusal into a journal row, so the journal (and
// its disk) grows at the attacker's pace. The deliberate exception: a
// refusal row (a terminal row with `terminal` `rejected` or `invalid` and no
// engine attempt) is written while its `reason`'s token bucket holds a
// token — at most `rows_per_s` rows a second per reason, in bursts of at
// most as many; past that the rows are counted, and for each reason with
// counted rows one summary row is due a second after the first of them:
//   {"event": "refusals_suppressed", "reason": R, "count": N,
//    "first_at": <wall s>, "at": <wall s>}
// Every other row (completed, failed, expired, cancelled, any request that
// reached an engine, event rows) is always written.
//
// Pure logic on the caller's clock readings (no timer, no lock): Journal
// calls it under its own lock. The set of reasons is the router's bounded
// enum, so the per-reason state is bounded.
#ifndef NARWHAL_ROUTER_COMMON_REFUSAL_ROW_LIMITER_H_
#define NARWHAL_ROUTER_COMMON_REFUSAL_ROW_LIMITER_H_

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "router/common/clock.h"

namespace narwhal::router {

class RefusalRowLimiter {
 public:
  // `rows_per_s` <= 0: no limit (every row is written).
  explicit RefusalRowLimiter(double rows_per_s) : rows_per_s_(rows_per_s) {}

  // Whether `row` may be written at `now` (`wall_now` in unix seconds);
  // false: it was counted into its reason's next summary.
  bool Admit(const nlohmann::json& row, MonoTime now, double wall_now);

  // The summary rows due at `now` (a reason's first counted row at least a
  // second old), or with `all` every pending one (shutdown); each reason's
  // count starts again from zero.
  std::vector<nlohmann::json> TakeSummaries(MonoTime now, double wall_now, bool all);

  // Rows counted and not yet summarised.
  bool pending() const { return pending_ > 0; }

  // Whether `row` is a refusal row in the sense above.
  static bool IsRefusalRow(const nlohmann::json& row);

 private:
  struct Bucket {
    double tokens = 0;
    MonoTime refilled{};
    bool started = false;
    long long suppressed = 0;
    MonoTime first_suppressed{};
    double first_suppressed_wall = 0;
  };

  const double rows_per_s_;
  std::map<std::string, Bucket> buckets_;
  long long pending_ = 0;
};

}  // namespace narwhal::router

#endif  // NARWHAL_ROUTER_COMMON_REFUSAL_ROW_LIMITER_H_
