// The two load engines of narwhal-bench: Beast coroutines for the HTTP
// modes (http, direct, decode-only) and gRPC callback reactors for grpc.
//
// Both run Options::concurrency workers that loop requests until the window
// (Options::duration_s) ends, start them spread over Options::ramp_s, and
// back off 20 ms after a failed request. Meter::Start/Stop bracket the
// window. When it ends, counting stops and every request still in flight is
// cut (HTTP: its connection is closed; gRPC: TryCancel): its frames received
// so far count, but it counts as neither ok nor failed. Both also record
// how late a 10 ms timer fires (HTTP: on the io_context; gRPC: a grpc::Alarm
// on the callback threads that run the reactions) in Tally::loop_lag_s.
#ifndef NARWHAL_TOOLS_BENCH_LOAD_H_
#define NARWHAL_TOOLS_BENCH_LOAD_H_

#include <chrono>

#include "tools/bench/options.h"
#include "tools/bench/tally.h"

namespace narwhal::bench {

// The pacing both load engines share (see above).
inline constexpr auto kFailureBackoff = std::chrono::milliseconds(20);
inline constexpr auto kLagProbeInterval = std::chrono::milliseconds(10);
inline constexpr auto kDrainLimit = std::chrono::seconds(10);

struct RunResult {
  Tally tally;
  double drain_s = 0;  // from the end of the window until every worker stopped
};

// Returns false with *error set when a target cannot be resolved.
bool RunHttpLoad(const Options& o, Meter& meter, RunResult* result, std::string* error);
bool RunGrpcLoad(const Options& o, Meter& meter, RunResult* result, std::string* error);

}  // namespace narwhal::bench

#endif  // NARWHAL_TOOLS_BENCH_LOAD_H_
