// Process-wide settings of the libraries narwhal runs on, applied once at the
// start of each binary's main, before any thread starts.
#ifndef NARWHAL_SERVER_RUNTIME_TUNING_H_
#define NARWHAL_SERVER_RUNTIME_TUNING_H_

namespace narwhal::server {

// Debian builds Abseil without NDEBUG, so absl::Mutex — which gRPC uses for
// every lock in its core — keeps a lock-order graph and checks it for cycles
// on every Lock(), and aborts the process on a suspected cycle. That is a
// debugging aid: a server turns it off, as a release build of Abseil does.
// Protobuf's own log lines (one per undecodable message) are rate-limited to
// one a second into the process log.
void TuneRuntime();

}  // namespace narwhal::server

#endif  // NARWHAL_SERVER_RUNTIME_TUNING_H_
