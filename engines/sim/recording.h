// Entries of GET /sim/requests made from httplib requests. Internal.
#ifndef NARWHAL_ENGINES_SIM_RECORDING_H_
#define NARWHAL_ENGINES_SIM_RECORDING_H_

#include <httplib.h>

#include <cstdint>

#include "engines/sim/engine_state.h"

namespace narwhal::sim {

// Adds the record of `req` (method, path, lower-cased headers with the
// Authorization credentials redacted, body) and returns its seq. Bodies over
// 256 KiB are not kept: the record says body_truncated and body_bytes.
// Bodies that are not JSON (or nest too deep to keep as JSON) are recorded
// as their raw text.
uint64_t BeginRecord(EngineState& state, const httplib::Request& req);

// Sets the status and ends the record now.
void FinishRecord(EngineState& state, uint64_t seq, int status, RequestEnd end);

}  // namespace narwhal::sim

#endif  // NARWHAL_ENGINES_SIM_RECORDING_H_
