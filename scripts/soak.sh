#!/usr/bin/env bash
# The chaos soak (tests/soak): narwhal-serve over six narwhal-sim engines,
# 200 concurrent HTTP and gRPC streams for SECONDS (default 600) while
# every sim fault kind is injected and engines are frozen, killed and
# restarted, then the contract, leak and readmission checks. Builds what it
# needs into $NARWHAL_BUILD_DIR (default build/) and prints the figures.
#
#   scripts/soak.sh [SECONDS] [more narwhal_soak flags, e.g. --seed N --keep]
#
# NARWHAL_SOAK_SEED replays a run's random choices. Exit status: the soak's.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${NARWHAL_BUILD_DIR:-$root/build}"
seconds="${1:-600}"
shift || true
"$root/deploy/install-deps.sh"
source "$root/scripts/lib/configure.sh"
narwhal_configure "$build" -DBUILD_TESTING=ON -DCMAKE_BUILD_TYPE="${NARWHAL_BUILD_TYPE:-RelWithDebInfo}"
cmake --build "$build" -j"$(nproc)" --target narwhal_soak narwhal-serve narwhal-sim
echo "soak: $build/bin/narwhal_soak --seconds $seconds $*"
exec "$build/bin/narwhal_soak" --seconds "$seconds" "$@"
