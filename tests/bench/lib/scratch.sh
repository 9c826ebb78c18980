# Sourced by the benchmark scripts: a scratch directory ($work) removed on
# exit, and every background process whose pid a script appends to $pids
# killed then (also on INT and TERM).
work="$(mktemp -d)"
pids=()
bench_cleanup() {
  trap - EXIT INT TERM
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap bench_cleanup EXIT
trap 'exit 130' INT TERM
