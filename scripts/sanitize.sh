#!/usr/bin/env bash
# Builds the tests with a sanitizer and runs them (CI runs both modes after
# scripts/test.sh). Extra arguments go to ctest (e.g. -R Router).
#
#   scripts/sanitize.sh address   ASan + UBSan (undefined behaviour fatal) and
#                                 LeakSanitizer: every `unit` and `component`
#                                 test. Build folder build-asan/, which the
#                                 fuzz targets share (scripts/fuzz.sh).
#   scripts/sanitize.sh thread    ThreadSanitizer: the router core's and the
#                                 event loops' tests (TSAN_TARGETS below).
#                                 Build folder build-tsan/.
#
# Both build with clang++ (g++ builds and ships narwhal; the sanitizer
# builds also prove that clang compiles it). Clang 14 cannot compile
# coroutines with UBSan's -fsanitize=function, so that one check is off.
#
# NARWHAL_SANITIZE_BUILD_DIR overrides the build folder. Every test process is
# bounded by NARWHAL_SANITIZE_TEST_TIMEOUT seconds (default 240; ctest's own
# TIMEOUT properties still apply).
#
# Not under TSan: Debian's gRPC and Abseil are not built with TSan, so the
# locks inside them (absl::Mutex, gRPC's completion queues and executors) are
# invisible to it, and every test whose state is handed over by those locks
# reports false races: the gRPC doors and the admin service
# (server_component_test, admin_component_test, server_unit_test's config
# and gRPC call tests), narwhal-sim's tests (sim_test, sim_component_test)
# and every test that starts narwhal-sim (its state is behind absl::Mutex):
# beast_engine_client_test, engine_tls_test, steady_state_alloc_test,
# relay_alloc_test.
# Debian's libzmq is not built with TSan either: its I/O thread hands each
# message's bytes over through lock-free pipes TSan cannot see, so every read
# of a received frame is reported (kv_subscriber_test, which ASan runs; the
# stream's and the index's logic run under TSan in fleet_test). The e2e
# label runs no sanitizer.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mode="${1:-}"
if [[ $# -gt 0 ]]; then shift; fi

# Test binaries of the `unit` and `component` labels (address mode builds all
# of them); the e2e binaries are listed so that a new test binary that is in
# neither list stops the run instead of being skipped. Most folders have one
# binary per label (tests/CMakeLists.txt, narwhal_test_binary).
UNIT_TARGETS=(
  engines_test engines_http_test sim_test router_unit_test fleet_test
  server_unit_test config_limits_test server_core_test
)
COMPONENT_TARGETS=(
  engines_http_component_test beast_engine_client_test engine_tls_test
  steady_state_alloc_test sim_component_test engine_text_relay_test cares_resolver_test
  server_component_test http_door_test relay_alloc_test admin_component_test
  kv_subscriber_test kv_events_sim_test
)
E2E_TARGETS=(narwhal_e2e_test admin_e2e_test breaker_e2e_test preflight_e2e_test)
# ThreadSanitizer: no gRPC and no narwhal-sim in the path (see above).
TSAN_TARGETS=(
  engines_test engines_http_test engines_http_component_test router_unit_test fleet_test
  cares_resolver_test server_core_test http_door_test
)

case "$mode" in
  address)
    build="${NARWHAL_SANITIZE_BUILD_DIR:-$root/build-asan}"
    targets=("${UNIT_TARGETS[@]}" "${COMPONENT_TARGETS[@]}")
    ;;
  thread)
    build="${NARWHAL_SANITIZE_BUILD_DIR:-$root/build-tsan}"
    targets=("${TSAN_TARGETS[@]}")
    ;;
  *)
    echo "usage: $0 address|thread [ctest arguments]" >&2
    exit 2
    ;;
esac
supp="$root/tests/sanitizers"

NARWHAL_SKIP_NPM=1 "$root/deploy/install-deps.sh"
source "$root/scripts/lib/configure.sh"
# clang++ for both: it compiles this code with sanitizers about 1.7 times
# faster than g++, and the address build folder is also the fuzz targets'
# (scripts/fuzz.sh), which need clang's libFuzzer.
fuzz=()
if [[ "$mode" == address ]]; then fuzz=(-DNARWHAL_FUZZ=ON); fi
narwhal_configure "$build" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DBUILD_TESTING=ON -DNARWHAL_SANITIZE="$mode" "${fuzz[@]}" \
  -DNARWHAL_SANITIZE_TARGETS="$(IFS=";"; echo "${targets[*]}")" \
  -DNARWHAL_SANITIZE_TEST_TIMEOUT="${NARWHAL_SANITIZE_TEST_TIMEOUT:-240}"
cmake --build "$build" -j"$(nproc)" --target narwhal_sanitize_tests
cd "$build"

# Test numbers (ctest -I) of the tests whose binary is one of "$@".
tests_of_binaries() {
  local re
  re="/bin/($(IFS='|'; echo "$*"))\""
  ctest -N -V | awk -v re="$re" '
    /^ *[0-9]+: Test command: / && $0 ~ re { sub(/:.*/, ""); gsub(/ /, ""); printf ",%s", $0 }'
}

if [[ "$mode" == address ]]; then
  # A test binary that is in no list above would silently not run.
  known=" ${UNIT_TARGETS[*]} ${COMPONENT_TARGETS[*]} ${E2E_TARGETS[*]} "
  unknown=()
  while read -r t; do
    [[ "$known" == *" ${t%_NOT_BUILT} "* ]] || unknown+=("${t%_NOT_BUILT}")
  done < <(ctest -N | sed -n 's/^ *Test *#[0-9]*: \(.*_NOT_BUILT\)$/\1/p')
  if ((${#unknown[@]})); then
    echo "sanitize: test binaries missing from scripts/sanitize.sh: ${unknown[*]}" >&2
    exit 1
  fi
  export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1"
  export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
  select=(-L '^(unit|component)$')
else
  export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$supp/tsan.supp"
  numbers="$(tests_of_binaries "${TSAN_TARGETS[@]}")"
  if [[ -z "$numbers" ]]; then
    echo "sanitize: no tests found for ${TSAN_TARGETS[*]}" >&2
    exit 1
  fi
  select=(-I "0,0,0$numbers")
fi
ctest --output-on-failure -j"$(nproc)" --timeout 300 "${select[@]}" "$@"
