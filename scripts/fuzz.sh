#!/usr/bin/env bash
# Builds and runs the libFuzzer targets of tests/fuzz (clang++, ASan + UBSan)
# in the address sanitizer's build folder, build-asan/ (override with
# NARWHAL_SANITIZE_BUILD_DIR, as for scripts/sanitize.sh address): the targets
# link the same instrumented libraries as the sanitizer suite.
#
#   scripts/fuzz.sh smoke                    build, replay tests/fuzz/regressions,
#                                            then run each target for a few seconds
#   scripts/fuzz.sh long SECONDS [target...] run each target (default: all) for
#                                            SECONDS, one at a time, and report
#                                            execs/s and coverage
#   scripts/fuzz.sh replay                   build, then run every committed seed
#                                            and regression input once
#   scripts/fuzz.sh build                    build only
#
# Fuzzers run one job each under `nice -n 15`. New inputs go to
# BUILD/fuzz-corpus/<target> (the committed seeds in tests/fuzz/corpus are
# only read); crashes to BUILD/fuzz-artifacts/<target>/; logs to
# BUILD/fuzz-logs/. Exit status: non-zero when a build, a replay or a run
# fails (a crash, a leak, a timeout or an out-of-memory input).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${NARWHAL_SANITIZE_BUILD_DIR:-$root/build-asan}"
jobs="${NARWHAL_FUZZ_BUILD_JOBS:-2}"
smoke_seconds="${NARWHAL_FUZZ_SMOKE_SECONDS:-5}"
fuzz_dir="$root/tests/fuzz"
all_targets=(fuzz_sse_stream fuzz_continuation fuzz_prefill_response fuzz_openai_request
             fuzz_grpc_request fuzz_fleet_config fuzz_http_request fuzz_kv_events)

usage() {
  sed -n '2,20p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
  exit 2
}

build_targets() {
  if ! command -v clang++ >/dev/null; then
    echo "fuzz: clang++ is required (apt-get install clang)" >&2
    exit 1
  fi
  NARWHAL_SKIP_NPM=1 "$root/deploy/install-deps.sh"
  source "$root/scripts/lib/configure.sh"
  # The same cache values as scripts/sanitize.sh address, so that neither
  # script's configure invalidates the other's objects.
  narwhal_configure "$build" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DBUILD_TESTING=ON -DNARWHAL_SANITIZE=address -DNARWHAL_FUZZ=ON
  cmake --build "$build" -j"$jobs" --target narwhal_fuzz
}

# Common libFuzzer flags: inputs up to 16 KiB, a unit slower than 25 s or
# above 2 GiB counts as a failure.
fuzz_flags=(-max_len=16384 -timeout=25 -rss_limit_mb=2048 -print_final_stats=1)

# libFuzzer dictionaries (tests/fuzz/dict): the JSON and wire tokens each
# parser looks for.
dict_flag() {
  local name
  case "$1" in
    fuzz_sse_stream) name=sse ;;
    fuzz_http_request) name=http ;;
    fuzz_grpc_request | fuzz_kv_events) return 0 ;;
    *) name=json ;;
  esac
  echo "-dict=$fuzz_dir/dict/$name.dict"
}

# Runs every file of the given directories through a target once.
replay() {
  local target="$1"
  shift
  local files=()
  local dir
  for dir in "$@"; do
    [[ -d "$dir" ]] || continue
    while IFS= read -r -d '' f; do files+=("$f"); done < <(find "$dir" -type f ! -name '*.md' -print0 | sort -z)
  done
  ((${#files[@]} > 0)) || return 0
  local log="$build/fuzz-logs/$target.replay.log"
  if ! nice -n 15 "$build/fuzz/$target" -runs=1 -timeout=25 -rss_limit_mb=2048 "${files[@]}" \
      >"$log" 2>&1; then
    echo "fuzz: $target failed replaying $* (log: $log)" >&2
    tail -n 40 "$log" >&2
    return 1
  fi
  echo "fuzz: $target replayed ${#files[@]} inputs"
}

# Runs one target for $2 seconds; prints one summary line.
run_target() {
  local target="$1" seconds="$2"
  local work="$build/fuzz-corpus/$target"
  local artifacts="$build/fuzz-artifacts/$target/"
  local log="$build/fuzz-logs/$target.run.log"
  mkdir -p "$work" "$artifacts"
  local dict
  dict="$(dict_flag "$target")"
  local status=0
  # shellcheck disable=SC2086  # $dict is empty or one word
  nice -n 15 "$build/fuzz/$target" "${fuzz_flags[@]}" $dict -max_total_time="$seconds" \
    -artifact_prefix="$artifacts" "$work" "$fuzz_dir/corpus/$target" >"$log" 2>&1 || status=$?
  local last execs speed cov ft units
  last="$(grep -E '^#[0-9]+' "$log" | tail -n 1 || true)"
  cov="$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")"
  ft="$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")"
  execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")"
  speed="$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")"
  units="$(find "$work" -type f | wc -l)"
  printf '%-24s %6ss  execs %-10s execs/s %-7s cov %-6s ft %-7s corpus %s%s\n' \
    "$target" "$seconds" "${execs:-?}" "${speed:-?}" "${cov:-?}" "${ft:-?}" "$units" \
    "$( ((status == 0)) || echo "  FAILED (rc $status, log $log)")"
  if ((status != 0)); then
    grep -E 'ERROR: |fuzz invariant failed|SUMMARY:|Test unit written' "$log" | head -n 8 >&2 || true
  fi
  return "$status"
}

check_targets() {
  local t
  for t in "$@"; do
    if [[ ! " ${all_targets[*]} " == *" $t "* ]]; then
      echo "fuzz: unknown target $t (have: ${all_targets[*]})" >&2
      exit 2
    fi
  done
}

mode="${1:-}"
[[ -n "$mode" ]] || usage
shift
mkdir -p "$build/fuzz-logs"
failed=0
case "$mode" in
  build)
    build_targets
    ;;
  smoke)
    build_targets
    for t in "${all_targets[@]}"; do
      replay "$t" "$fuzz_dir/regressions/$t" || failed=1
    done
    for t in "${all_targets[@]}"; do
      run_target "$t" "$smoke_seconds" || failed=1
    done
    ;;
  replay)
    build_targets
    for t in "${all_targets[@]}"; do
      replay "$t" "$fuzz_dir/corpus/$t" "$fuzz_dir/regressions/$t" || failed=1
    done
    ;;
  long)
    seconds="${1:-}"
    [[ "$seconds" =~ ^[0-9]+$ ]] || usage
    shift
    targets=("$@")
    ((${#targets[@]} > 0)) || targets=("${all_targets[@]}")
    check_targets "${targets[@]}"
    build_targets
    for t in "${targets[@]}"; do
      run_target "$t" "$seconds" || failed=1
    done
    ;;
  *)
    usage
    ;;
esac
exit "$failed"
