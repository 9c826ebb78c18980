#!/usr/bin/env bash
# Two routers on the same sims and the same load, in turn: requests per
# second, added first-token latency (p50/p99 against a client that calls the
# sims itself) and requests per router CPU-second, through both doors, at
# serving.io_threads 2 and 16. Made to compare the fleet before and after a
# change of its hot path (the placement snapshot redesign): point BEFORE at
# a narwhal-serve built from the older commit.
#
#   tests/bench/fleet_redesign_bench.sh BEFORE_SERVE AFTER_SERVE [BUILD_DIR] [DURATION_S]
#
# BUILD_DIR gives narwhal-bench and narwhal-sim (default build). Short
# requests (TOKENS=8 at TOKEN_MS=1) so that placement and the per-attempt
# bookkeeping weigh, not the relay. Environment: CONCURRENCY (256),
# ROUNDS (2: each router runs every row this many times, alternating).
# On a shared 2-core machine compare the ratios of one run.
set -euo pipefail
before="${1:?before narwhal-serve}"
after="${2:?after narwhal-serve}"
build="${3:-build}"
duration="${4:-10}"
bin="$build/bin"
conc="${CONCURRENCY:-256}"
rounds="${ROUNDS:-2}"
for b in "$before" "$after" "$bin/narwhal-bench" "$bin/narwhal-sim"; do
  [[ -x "$b" ]] || { echo "fleet_redesign_bench: $b missing" >&2; exit 2; }
done
source "$(dirname "${BASH_SOURCE[0]}")/lib/scratch.sh"

start_sim() {  # id role
  "$bin/narwhal-sim" --port 0 --engine-id "$1" --role "$2" --token-interval-ms "${TOKEN_MS:-1}" \
    --threads 1024 >"$work/$1.out" 2>"$work/$1.err" &
  pids+=($!)
}
port_of() {
  for _ in $(seq 100); do
    grep -q ready "$work/$1.out" 2>/dev/null && break
    sleep 0.05
  done
  grep -o 'port=[0-9]*' "$work/$1.out" | cut -d= -f2
}
start_sim p0 prefill; start_sim p1 prefill; start_sim d0 decode; start_sim d1 decode
p0=$(port_of p0); p1=$(port_of p1); d0=$(port_of d0); d1=$(port_of d1)

bench() {  # args... -> one JSON line
  timeout -k 5 $((duration + 60)) "$bin/narwhal-bench" --json --max-tokens "${TOKENS:-8}" \
    --concurrency "$conc" --duration-s "$duration" --threads 2 "$@" || true
}

# One router with `io` loops: its HTTP and gRPC rows.
run_router() {  # label serve io
  local label="$1" serve="$2" io="$3"
  cat >"$work/fleet.json" <<JSON
{"model": "Qwen/Qwen3-0.6B",
 "engines": [
   {"iid": "p0", "url": "http://127.0.0.1:$p0", "role": "prefill"},
   {"iid": "p1", "url": "http://127.0.0.1:$p1", "role": "prefill"},
   {"iid": "d0", "url": "http://127.0.0.1:$d0", "role": "decode"},
   {"iid": "d1", "url": "http://127.0.0.1:$d1", "role": "decode"}],
 "serving": {"io_threads": $io, "max_inflight": 4096},
 "engine": {"first_token_timeout_s": 30, "decode_read_timeout_s": 30}}
JSON
  "$serve" --config "$work/fleet.json" --http 127.0.0.1:0 --grpc 127.0.0.1:0 \
    >"$work/serve.out" 2>"$work/serve.err" &
  local pid=$!
  pids+=("$pid")
  for _ in $(seq 200); do grep -q ready "$work/serve.out" 2>/dev/null && break; sleep 0.05; done
  local http grpc
  http=$(grep -o 'http=[^ ]*' "$work/serve.out" | cut -d= -f2)
  grpc=$(grep -o 'grpc=[^ ]*' "$work/serve.out" | cut -d= -f2)
  [[ -n "$http" && -n "$grpc" ]] || { echo "fleet_redesign_bench: $serve did not start" >&2; kill "$pid"; return 1; }
  echo "$label io=$io http $(bench --mode http --target "$http" --pid "$pid")" >>"$work/rows"
  echo "$label io=$io grpc $(bench --mode grpc --target "$grpc" --pid "$pid")" >>"$work/rows"
  kill "$pid"; wait "$pid" 2>/dev/null || true
}

echo "# sims p0:$p0 p1:$p1 d0:$d0 d1:$d1; ${duration}s per row; c=$conc; ${TOKENS:-8} tokens at ${TOKEN_MS:-1} ms; $rounds rounds"
for r in $(seq "$rounds"); do
  echo "direct $(bench --mode direct --prefill "http://127.0.0.1:$p0" --decode "http://127.0.0.1:$d0")" >>"$work/rows"
  for io in 2 16; do
    run_router before "$before" "$io"
    run_router after "$after" "$io"
  done
done

python3 - "$work/rows" <<'PY'
import json, statistics, sys
rows = {}
direct = []
for line in open(sys.argv[1]):
    parts = line.split(" ", 3)
    if parts[0] == "direct":
        direct.append(json.loads(line.split(" ", 1)[1]))
        continue
    label, io, door, doc = parts
    rows.setdefault((io, door, label), []).append(json.loads(doc))
med = lambda xs: statistics.median(xs) if xs else float("nan")
d50 = med([d["ttft_p50_ms"] for d in direct]); d99 = med([d["ttft_p99_ms"] for d in direct])
print(f"direct: ttft p50 {d50:.2f} ms, p99 {d99:.2f} ms (median of {len(direct)} runs)")
print(f"{'io':6} {'door':5} {'router':7} {'req/s':>8} {'failed':>7} {'+p50 ms':>8} {'+p99 ms':>8} {'req/cpu-s':>10} {'bench cpu':>9}")
for io in ("io=2", "io=16"):
    for door in ("http", "grpc"):
        vals = {}
        for label in ("before", "after"):
            rs = rows.get((io, door, label), [])
            rps = med([r["requests_ok"] / r["elapsed_s"] for r in rs])
            fail = sum(r["requests_failed"] for r in rs)
            a50 = med([r["ttft_p50_ms"] for r in rs]) - d50
            a99 = med([r["ttft_p99_ms"] for r in rs]) - d99
            rcpu = med([r["requests_ok"] / r["relay_cpu_s"] for r in rs if r.get("relay_cpu_s")])
            bcpu = med([r["bench_cpu_share"] for r in rs])
            vals[label] = rps, rcpu
            print(f"{io:6} {door:5} {label:7} {rps:8.0f} {fail:7d} {a50:8.2f} {a99:8.2f} {rcpu:10.0f} {bcpu:9.2f}")
        b, a = vals["before"], vals["after"]
        print(f"{io:6} {door:5} {'ratio':7} {a[0]/b[0]:8.2f}x {'':7} {'':8} {'':8} {a[1]/b[1]:9.2f}x")
PY
