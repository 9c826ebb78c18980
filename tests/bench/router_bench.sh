#!/usr/bin/env bash
# Measures the router against external narwhal-sim processes (so the router's
# CPU time is its own, and the engines do the real NIXL-style handoff between
# themselves): relayed frames per router CPU-second through HTTP and gRPC at a
# few concurrencies, and the router's added latency to the first token
# compared with a client that calls the prefill and decode sims itself.
# For the relay cost against nginx with cheap engines, see relay_vs_nginx.sh.
#
#   tests/bench/router_bench.sh [BUILD_DIR] [DURATION_S]
#
# Environment: CONCURRENCY ("8 64 256"), TOKEN_MS (2), TOKENS (64).
# Numbers on a shared 2-core machine are noisy: compare the ratios of one run.
set -euo pipefail
build="${1:-build}"
duration="${2:-10}"
bin="$build/bin"
for b in narwhal-serve narwhal-bench narwhal-sim; do
  [[ -x "$bin/$b" ]] || { echo "router_bench: $bin/$b missing (build it first)" >&2; exit 2; }
done
source "$(dirname "${BASH_SOURCE[0]}")/lib/scratch.sh"

start_sim() {  # id role (run in this shell, not a subshell, so cleanup sees the pid)
  "$bin/narwhal-sim" --port 0 --engine-id "$1" --role "$2" --token-interval-ms "${TOKEN_MS:-2}" \
    --threads 1024 >"$work/$1.out" 2>"$work/$1.err" &
  pids+=($!)
}
port_of() {  # id -> the port from its ready line
  for _ in $(seq 100); do
    grep -q ready "$work/$1.out" 2>/dev/null && break
    sleep 0.05
  done
  grep -o 'port=[0-9]*' "$work/$1.out" | cut -d= -f2
}

start_sim p0 prefill; start_sim p1 prefill; start_sim d0 decode; start_sim d1 decode
p0=$(port_of p0); p1=$(port_of p1); d0=$(port_of d0); d1=$(port_of d1)
cat >"$work/fleet.json" <<JSON
{"model": "Qwen/Qwen3-0.6B",
 "engines": [
   {"iid": "p0", "url": "http://127.0.0.1:$p0", "role": "prefill"},
   {"iid": "p1", "url": "http://127.0.0.1:$p1", "role": "prefill"},
   {"iid": "d0", "url": "http://127.0.0.1:$d0", "role": "decode"},
   {"iid": "d1", "url": "http://127.0.0.1:$d1", "role": "decode"}],
 "engine": {"first_token_timeout_s": 30, "decode_read_timeout_s": 30}}
JSON
"$bin/narwhal-serve" --config "$work/fleet.json" --http 127.0.0.1:0 --grpc 127.0.0.1:0 \
  --admin 127.0.0.1:0 >"$work/serve.out" 2>"$work/serve.err" &
serve=$!
pids+=("$serve")
for _ in $(seq 100); do grep -q ready "$work/serve.out" 2>/dev/null && break; sleep 0.05; done
http=$(grep -o 'http=[^ ]*' "$work/serve.out" | cut -d= -f2)
grpc=$(grep -o 'grpc=[^ ]*' "$work/serve.out" | cut -d= -f2)
[[ -n "$http" && -n "$grpc" ]] || { echo "router_bench: narwhal-serve did not start" >&2; exit 1; }

run() { timeout -k 5 $((duration + 60)) "$bin/narwhal-bench" --max-tokens "${TOKENS:-64}" "$@" || true; }
echo "# router pid $serve; sims p0:$p0 p1:$p1 d0:$d0 d1:$d1; ${duration}s per row; token interval ${TOKEN_MS:-2} ms"
for c in ${CONCURRENCY:-8 64 256}; do
  run --mode direct --prefill "http://127.0.0.1:$p0" --decode "http://127.0.0.1:$d0" \
    --concurrency "$c" --duration-s "$duration"
  run --mode http --target "$http" --pid "$serve" --concurrency "$c" --duration-s "$duration"
  run --mode grpc --target "$grpc" --pid "$serve" --concurrency "$c" --duration-s "$duration"
done
