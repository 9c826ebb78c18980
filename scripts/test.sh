#!/usr/bin/env bash
# Builds narwhal with its tests and runs them all (unit, component, end to
# end, real clients). Extra arguments go to ctest (e.g. -R B13).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${NARWHAL_BUILD_DIR:-$root/build}"
"$root/scripts/build.sh" -DBUILD_TESTING=ON
cd "$build"
ctest --output-on-failure -j"$(nproc)" --timeout 300 "$@"
