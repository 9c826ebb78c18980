#!/usr/bin/env bash
# Builds narwhal with its tests and runs them all (unit, component, end to
# end, real clients). Extra arguments go to ctest (e.g. -R B13).
#
# The end-to-end tests run real processes on a shared machine, so a test that
# fails gets one more run (ctest --repeat until-pass:2): a broken behaviour
# fails both. A test that needed its second run is named at the end as flaky,
# so that it is seen and fixed rather than hidden.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${NARWHAL_BUILD_DIR:-$root/build}"
"$root/scripts/build.sh" -DBUILD_TESTING=ON
cd "$build"
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
rc=0
ctest --output-on-failure -j"$(nproc)" --timeout 300 --repeat until-pass:2 "$@" 2>&1 |
  tee "$log" || rc=$?
flaky="$(sed -n 's/^ *[0-9]*\/[0-9]* Test *#[0-9]*: \([^ ]*\) .*\*\*\*\(Failed\|Timeout\|Exception\).*/\1/p' "$log" |
  sort -u | while read -r t; do
    grep -qE "Test +#[0-9]+: $t \.+ +Passed" "$log" && echo "$t"; done || true)"
if [[ -n "$flaky" ]]; then
  echo "test: flaky (failed, then passed on its second run):" >&2
  sed 's/^/test:   /' <<<"$flaky" >&2
fi
exit "$rc"
