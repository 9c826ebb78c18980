#!/usr/bin/env bash
# Installs what is missing (deploy/install-deps.sh) and builds narwhal into
# build/ (override with NARWHAL_BUILD_DIR). Extra arguments go to cmake.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${NARWHAL_BUILD_DIR:-$root/build}"
"$root/deploy/install-deps.sh"
source "$root/scripts/lib/configure.sh"
narwhal_configure "$build" -DCMAKE_BUILD_TYPE="${NARWHAL_BUILD_TYPE:-RelWithDebInfo}" "$@"
cmake --build "$build" -j"$(nproc)"
