// narwhal-bench: load generator and measurement tool (SPEC §2).
//
// Drives N concurrent streaming generations for a fixed window through one
// of four paths and reports requests ok/failed/cut, relayed generated-token
// frames (one SSE event carrying generated text, or one gRPC Delta), frames
// per second, client time to the first token (from the start of the request
// to its first generated-token frame; p50/p90/p99), and — with --pid — the
// relay's CPU seconds (utime + stime from /proc/PID/stat, summed over the
// listed processes) and frames per relay CPU-second, plus its own CPU share
// so a reader can tell whether the load driver was the bottleneck:
//   --mode http         the router's OpenAI HTTP shim (SSE)
//   --mode grpc         the router's narwhal.v1.Inference/Generate
//   --mode direct       no router: the client runs the prefill leg (SPEC B1)
//                       on --prefill and streams the decode leg from --decode
//                       with the producer's kv_transfer_params; the latency
//                       baseline (TTFT counts from the start of the prefill)
//   --mode decode-only  only the streaming decode request, sent to --target
//                       (an engine, or a plain proxy such as nginx)
// The load engines are event-driven (tools/bench/load.h): Beast coroutines
// on --threads threads for the HTTP modes, gRPC callback reactors for grpc.
#include <signal.h>
#include <sys/resource.h>

#include <iostream>
#include <string>

#include "server/runtime_tuning.h"
#include "tools/bench/load.h"
#include "tools/bench/options.h"
#include "tools/bench/tally.h"

namespace narwhal::bench {
namespace {

void RaiseFdLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
  }
}

int Main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  Options options;
  if (!ParseArgs(argc, argv, &options)) return 2;
  for (int pid : options.pids) {
    if (ProcessCpuSeconds(pid) < 0) {
      std::cerr << "narwhal-bench: cannot read /proc/" << pid << "/stat\n";
      return 2;
    }
  }
  RaiseFdLimit();
  Meter meter(options.pids);
  RunResult result;
  std::string error;
  const bool ran = options.mode == Mode::kGrpc ? RunGrpcLoad(options, meter, &result, &error)
                                               : RunHttpLoad(options, meter, &result, &error);
  if (!ran) {
    std::cerr << "narwhal-bench: " << error << "\n";
    return 2;
  }
  return Report(options, result.tally, meter, result.drain_s);
}

}  // namespace
}  // namespace narwhal::bench

int main(int argc, char** argv) {
  narwhal::server::TuneRuntime();
  return narwhal::bench::Main(argc, argv);
}
