#!/usr/bin/env bash
# Builds narwhal and runs narwhal-serve. Without arguments it serves the
# embedded simulated fleet on 127.0.0.1:8000; arguments go to narwhal-serve
# (e.g. --config deploy/examples/fleet-minimal.json --journal /tmp/j.jsonl).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${NARWHAL_BUILD_DIR:-$root/build}"
"$root/scripts/build.sh" -DBUILD_TESTING=OFF
exec "$build/bin/narwhal-serve" "$@"
