#!/usr/bin/env bash
# Prefill placement benchmark in one command: least_loaded against
# cache_aware on a shared-prefix and a no-sharing workload (end to end through
# narwhal-serve and narwhal-sim, tests/bench/placement_bench.py), then the
# placement decision cost at 10k indexed prefixes (build/bin/placement_bench).
#
#   tests/bench/placement_bench.sh [BUILD_DIR] [extra placement_bench.py flags]
set -euo pipefail
build="${1:-build}"
shift || true
for b in narwhal-serve narwhal-sim placement_bench; do
  [[ -x "$build/bin/$b" ]] || { echo "placement_bench: $build/bin/$b missing (build it first)" >&2; exit 2; }
done
here="$(cd "$(dirname "$0")" && pwd)"
python3 "$here/placement_bench.py" --build "$build" "$@"
echo
"$build/bin/placement_bench" --benchmark_min_time=0.5
