// The failures a leg words the same way on every phase: the client went
// away, the request deadline passed, the connect timed out.
#ifndef NARWHAL_ENGINES_HTTP_LEG_FAILURES_H_
#define NARWHAL_ENGINES_HTTP_LEG_FAILURES_H_

#include <string>

#include "engines/engine_client.h"
#include "engines/engine_failure.h"

namespace narwhal::engines {

// "2.5s": seconds as the failures word them.
std::string FormatSeconds(double s);

// The client went away (kCancelled, no evidence).
EngineFailure Cancelled(Phase phase, const std::string& iid);
// The request deadline passed during the leg (kDeadline, no evidence).
EngineFailure DeadlineExpired(Phase phase, const std::string& iid);
// No connection to `key` ("host:port") within `seconds`.
EngineFailure ConnectTimeout(Phase phase, const EngineTarget& target, const std::string& key,
                             double seconds);

}  // namespace narwhal::engines

#endif  // NARWHAL_ENGINES_HTTP_LEG_FAILURES_H_
