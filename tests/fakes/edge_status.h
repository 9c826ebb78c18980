// How a test reads an outcome (or a failed leg) at the client edge: through
// the one status table (server/status_table.h), as the front doors do.
#ifndef NARWHAL_TESTS_FAKES_EDGE_STATUS_H_
#define NARWHAL_TESTS_FAKES_EDGE_STATUS_H_

#include <string>

#include "engines/engine_failure.h"
#include "router/outcome.h"
#include "server/status_table.h"

namespace narwhal::testing {

// The HTTP status the client sees (after commit: the terminal event's code).
inline int HttpStatus(const router::Outcome& outcome) {
  return server::StatusFor(outcome).http_status;
}
// The status a failed leg alone gives its client before any output.
inline int HttpStatus(const engines::EngineFailure& failure) {
  return server::FailureStatus(failure);
}
inline server::ErrorType ErrorTypeOf(const router::Outcome& outcome) {
  return server::StatusFor(outcome).error_type;
}
// The journal `reason` of an outcome.
inline std::string ReasonOf(const router::Outcome& outcome) {
  return std::string(router::ReasonName(outcome.reason));
}

}  // namespace narwhal::testing

#endif  // NARWHAL_TESTS_FAKES_EDGE_STATUS_H_
