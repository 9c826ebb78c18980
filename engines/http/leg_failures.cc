#include "engines/http/leg_failures.h"

#include <cstdio>

namespace narwhal::engines {

std::string FormatSeconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%gs", s);
  return buf;
}

EngineFailure Cancelled(Phase phase, const std::string& iid) {
  return MakeFailure(phase, iid, FailureReason::kCancelled, BreakerClass::kNone,
                     FailureCause::kNone, "client went away", false);
}

EngineFailure DeadlineExpired(Phase phase, const std::string& iid) {
  return MakeFailure(
      phase, iid, FailureReason::kDeadline, BreakerClass::kNone, FailureCause::kNone,
      std::string("request deadline passed during the ") + std::string(PhaseName(phase)) + " leg",
      false);
}

EngineFailure ConnectTimeout(Phase phase, const EngineTarget& target, const std::string& key,
                             double seconds) {
  return MakeFailure(
      phase, target.iid, FailureReason::kEngineUnreachable, BreakerClass::kConnection,
      FailureCause::kConnectTimeout,
      "engine unreachable: connect to " + key + " timed out after " + FormatSeconds(seconds), true);
}

}  // namespace narwhal::engines
