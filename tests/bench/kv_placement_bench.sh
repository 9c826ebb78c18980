#!/usr/bin/env bash
# KV-event placement benchmark in one command: prefill placement
# (least_loaded, cache_aware, kv_events) crossed with disaggregation
# (always, auto) on a multi-turn chat workload with a prefill engine
# restarted mid-run (end to end through narwhal-serve and narwhal-sim,
# tests/bench/kv_placement_bench.py).
#
#   tests/bench/kv_placement_bench.sh [BUILD_DIR] [extra kv_placement_bench.py flags]
set -euo pipefail
build=build
if [[ $# -gt 0 && "$1" != -* ]]; then
  build="$1"
  shift
fi
for b in narwhal-serve narwhal-sim; do
  [[ -x "$build/bin/$b" ]] || { echo "kv_placement_bench: $build/bin/$b missing (build it first)" >&2; exit 2; }
done
here="$(cd "$(dirname "$0")" && pwd)"
python3 "$here/kv_placement_bench.py" --build "$build" "$@"
