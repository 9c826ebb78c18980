#!/usr/bin/env bash
# Runs narwhal-serve. Without arguments it serves the embedded simulated
# fleet on 127.0.0.1:8000; arguments go to narwhal-serve (e.g. --config
# deploy/examples/fleet-minimal.json --journal /tmp/j.jsonl).
#
# The first run installs what building and running needs (NARWHAL_DEPS=run:
# no test packages, no npm clients), configures build/ and builds only
# narwhal-serve (about 140 compile units: roughly 20 minutes on 2 cores); a
# later run only checks that the binary is current and starts in seconds.
# Build output goes to stderr, so stdout carries narwhal-serve's own lines
# (its ready line among them). A tree that was moved or copied after it was
# configured is configured again.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${NARWHAL_BUILD_DIR:-$root/build}"
cache="$build/CMakeCache.txt"

if [[ -f "$cache" ]] && ! grep -qxF "CMAKE_HOME_DIRECTORY:INTERNAL=$root" "$cache"; then
  echo "serve: $build was configured for another source tree; configuring it again" >&2
  rm -rf "$cache" "$build/CMakeFiles"
fi
if [[ ! -f "$cache" ]]; then
  NARWHAL_DEPS=run "$root/deploy/install-deps.sh" >&2
  echo "serve: configuring $build" >&2
  source "$root/scripts/lib/configure.sh"
  narwhal_configure "$build" -DCMAKE_BUILD_TYPE="${NARWHAL_BUILD_TYPE:-RelWithDebInfo}" \
    -DBUILD_TESTING=OFF
fi
cmake --build "$build" -j"$(nproc)" --target narwhal-serve >&2
exec "$build/bin/narwhal-serve" "$@"
