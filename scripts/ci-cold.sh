#!/usr/bin/env bash
# Measures a cold CI run as a new machine sees it: a scratch clone of the
# current commit (HEAD, or the commit given), an empty compiler cache of its
# own, then `.ci/run` end to end. Prints each step's minutes and the total,
# and exits with .ci/run's status. The scratch clone and cache are removed
# afterwards (NARWHAL_CI_COLD_KEEP=1 keeps them).
#
#   scripts/ci-cold.sh [COMMIT]
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
commit="${1:-HEAD}"
scratch="$(mktemp -d "${TMPDIR:-/tmp}/narwhal-ci-cold.XXXXXX")"
if [[ "${NARWHAL_CI_COLD_KEEP:-0}" != 1 ]]; then trap 'rm -rf "$scratch"' EXIT; fi
git clone -q --no-hardlinks "$root" "$scratch/src"
git -C "$scratch/src" checkout -q "$(git -C "$root" rev-parse "$commit")"
# The npm test clients come from the registry like on any new machine.
log="$scratch/ci.log"
start=$SECONDS
(cd "$scratch/src" && CCACHE_DIR="$scratch/ccache" bash .ci/run) >"$log" 2>&1
rc=$?
total=$((SECONDS - start))
echo "ci-cold: $(git -C "$root" rev-parse --short "$commit") on $(nproc) cores, empty compiler cache"
sed -n 's/^ci: == \(.*\) took \([0-9]*\) s$/\2 \1/p' "$log" |
  awk '{ s = $1; $1 = ""; printf "ci-cold: %6.1f min %s\n", s / 60, $0 }'
awk -v t="$total" -v rc="$rc" 'BEGIN { printf "ci-cold: %6.1f min  total (exit %d)\n", t / 60, rc }'
if ((rc != 0)); then tail -40 "$log" >&2; fi
exit "$rc"
