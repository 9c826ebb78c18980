// Settings of one chaos soak run, from the command line and the
// environment (flags win):
//
//   narwhal_soak [--seconds N] [--seed N] [--streams N] [--keep]
//   NARWHAL_SOAK_SECONDS, NARWHAL_SOAK_SEED
//
// The seed is printed at the start; running again with it replays the same
// choices (fault kinds, parameters, victims, request shapes and abort
// points), though not the same interleaving.
#ifndef NARWHAL_TESTS_SOAK_SOAK_OPTIONS_H_
#define NARWHAL_TESTS_SOAK_SOAK_OPTIONS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace narwhal::soak {

struct SoakOptions {
  // Length of the loaded, chaotic part of the run.
  int seconds = 600;
  uint64_t seed = 0;
  // Concurrent client streams (one client thread each).
  int streams = 200;
  // Shares of the requests: through the gRPC door, streaming, aborted by
  // the client at a random moment.
  double grpc_share = 0.5;
  double stream_share = 0.75;
  double abort_share = 0.08;
  // Engine pacing and request sizes: ~1.5 s per request, so 200 streams
  // make ~130 requests/s, which two loaded cores carry. Beyond 200 streams
  // the pacing grows in proportion (ParseSoakOptions): the same rate, more
  // answers in flight at once.
  int token_interval_ms = 30;
  int min_tokens = 16;
  int max_tokens = 80;
  // Load and chaos run this long before the RSS reference is taken
  // (seconds / 2, 10..60 s), and RSS is compared over windows of this
  // length (seconds / 12, 5..30 s). The router's bounded state fills in
  // the first minute or so (the admin event history keeps the last 1000
  // breaker events, which chaos produces at ~20/s; allocator arenas grow
  // to the peak concurrency); the reference is taken as late as the run
  // allows.
  int warmup_s = 0;
  int rss_window_s = 0;
  // Keep the scratch directory (config, journal, logs) even on success.
  bool keep = false;
};

absl::StatusOr<SoakOptions> ParseSoakOptions(int argc, char** argv);

}  // namespace narwhal::soak

#endif  // NARWHAL_TESTS_SOAK_SOAK_OPTIONS_H_
