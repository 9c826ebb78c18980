#!/usr/bin/env bash
# The router's per-engine cost at the largest fleet the config allows: one
# narwhal-serve over 1,024 engines (512 prefill + 512 decode), each engine a
# listener of one bench_engine process on loopback (consecutive ports), so
# the engines cost one process and the router's numbers are its own.
#
#   up    the engines listen before the router starts: the time from the
#         router's start to GET /ready = 200; the router's peak thread count
#         while starting (sampled every 20 ms), threads and RSS once ready,
#         its CPU use while idle over IDLE_S seconds (liveness checks, the
#         monitor's ticks, consumers' /metrics scrapes); then GET /metrics: response bytes and series, wall time of single
#         scrapes (median and max of SCRAPES) and of 4 concurrent scrapes
#         (median and max over ROUNDS rounds), the router's CPU time per
#         scrape, its threads and peak RSS (VmHWM) after them.
#   late  the engines start LATE_S seconds after the router (every start-up
#         health check fails and retries until then): the router's peak
#         thread count while the engines are down, and the time from the
#         engines' start to ready.
#
#   tests/bench/large_fleet.sh [BUILD_DIR]
#
# Environment: PREFILL (512), DECODE (512), SCRAPES (9), ROUNDS (5),
# IDLE_S (10), LATE_S (3). Numbers on a shared 2-core machine are noisy: this reports,
# it does not judge.
set -euo pipefail
build="${1:-build}"
bin="$build/bin"
prefill="${PREFILL:-512}"
decode="${DECODE:-512}"
scrapes="${SCRAPES:-9}"
rounds="${ROUNDS:-5}"
idle_s="${IDLE_S:-10}"
late_s="${LATE_S:-3}"
engines=$((prefill + decode))
for b in narwhal-serve bench_engine; do
  [[ -x "$bin/$b" ]] || { echo "large_fleet: $bin/$b missing (build it first)" >&2; exit 2; }
done
source "$(dirname "${BASH_SOURCE[0]}")/lib/scratch.sh"

now() { date +%s.%N; }
calc() { awk "BEGIN { printf \"%.6f\", $1 }"; }  # arithmetic on decimals
holds() { awk "BEGIN { exit !($1) }"; }             # a comparison of decimals
elapsed() { calc "$(now) - $1"; }                   # seconds since $1
status_field() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/status"; }  # pid field
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }                  # utime + stime
median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
max() { sort -n | tail -n 1; }
ms() { awk '{ printf "%.1f\n", $1 * 1000 }'; }
hz=$(getconf CLK_TCK)
wait_line() {  # file pattern what
  for _ in $(seq 600); do
    grep -q "$2" "$1" 2>/dev/null && return 0
    sleep 0.05
  done
  echo "large_fleet: $3 did not start: $(tail -n 5 "${1%.out}.err" 2>/dev/null)" >&2
  exit 1
}

engine_pid=""
start_engines() {  # on `engines` consecutive ports from $base; 1 when one is taken
  "$bin/bench_engine" --port "$base" --listeners "$engines" --threads 1 \
    >"$work/engines.out" 2>"$work/engines.err" &
  engine_pid=$!
  pids+=("$engine_pid")
  for _ in $(seq 600); do
    grep -q ready "$work/engines.out" 2>/dev/null && return 0
    kill -0 "$engine_pid" 2>/dev/null || return 1
    sleep 0.05
  done
  echo "large_fleet: bench_engine did not start: $(tail -n 5 "$work/engines.err")" >&2
  exit 1
}
stop_engines() {
  kill "$engine_pid"
  wait "$engine_pid" 2>/dev/null || true
}

serve=""
http=""
peak_threads=0
start_router() {  # name
  "$bin/narwhal-serve" --config "$work/fleet.json" --http 127.0.0.1:0 --grpc 127.0.0.1:0 \
    --admin 127.0.0.1:0 >"$work/$1.out" 2>"$work/$1.err" &
  serve=$!
  pids+=("$serve")
  peak_threads=0
  wait_line "$work/$1.out" 'narwhal-serve ready' narwhal-serve
  http=$(grep -o 'http=[^ ]*' "$work/$1.out" | cut -d= -f2)
}
sample_threads() {
  local t
  t=$(status_field "$serve" Threads)
  ((t > peak_threads)) && peak_threads=$t
  return 0
}
wait_ready() {  # start-time
  until [[ "$(curl -s -o /dev/null -w '%{http_code}' "http://$http/ready")" == 200 ]]; do
    kill -0 "$serve" 2>/dev/null || { echo "large_fleet: narwhal-serve exited" >&2; exit 1; }
    holds "$(elapsed "$1") < 120" || { echo "large_fleet: not ready in 120 s" >&2; exit 1; }
    sample_threads
    sleep 0.02
  done
}
stop_router() {
  kill "$serve"
  wait "$serve" 2>/dev/null || true
}
scrape() {  # -> "bytes seconds"
  curl -s -o /dev/null -w '%{size_download} %{time_total}\n' "http://$http/metrics"
}

# The engines: the first free run of ports below the ephemeral range.
base=""
for ((b = 12000; b + engines < 32000; b += engines)); do
  base=$b
  start_engines && break
  base=""
done
[[ -n "$base" ]] || { echo "large_fleet: no $engines free consecutive ports" >&2; exit 1; }
{
  echo '{"model": "Qwen/Qwen3-0.6B", "engines": ['
  for ((i = 0; i < engines; ++i)); do
    if ((i < prefill)); then role=prefill; iid="p$i"; else role=decode; iid="d$((i - prefill))"; fi
    sep=","
    ((i < engines - 1)) || sep=""
    echo "  {\"iid\": \"$iid\", \"url\": \"http://127.0.0.1:$((base + i))\", \"role\": \"$role\"}$sep"
  done
  echo ']}'
} >"$work/fleet.json"

echo "# narwhal-serve over $engines engines ($prefill prefill + $decode decode: one bench_engine," \
  "ports $base..$((base + engines - 1)))"

# --- up: the engines are there first ---
start=$(now)
start_router up
wait_ready "$start"
ready_s=$(elapsed "$start")
for _ in $(seq 25); do sample_threads; sleep 0.02; done  # the last checks end
threads_ready=$(status_field "$serve" Threads)
rss_ready=$(status_field "$serve" VmRSS)
idle_before=$(cpu_ticks "$serve")
sleep "$idle_s"
idle_after=$(cpu_ticks "$serve")
curl -s "http://$http/metrics" >"$work/metrics.txt"
series=$(grep -vc '^#' "$work/metrics.txt" || true)
cpu_before=$(cpu_ticks "$serve")
for ((i = 0; i < scrapes; ++i)); do scrape; done >"$work/single.txt"
cpu_after=$(cpu_ticks "$serve")
for ((r = 0; r < rounds; ++r)); do
  curls=()
  for _ in 1 2 3 4; do
    scrape >>"$work/concurrent.txt" &
    curls+=($!)
  done
  wait "${curls[@]}"
done
printf 'up:   ready after            %.2f s\n' "$ready_s"
echo "up:   peak threads starting  $peak_threads"
echo "up:   threads when ready     $threads_ready"
echo "up:   RSS when ready         $((rss_ready / 1024)) MB"
printf 'up:   CPU while idle         %.1f%% of a core (%s s)\n' \
  "$(calc "($idle_after - $idle_before) * 100 / $hz / $idle_s")" "$idle_s"
echo "up:   /metrics bytes         $(awk '{ print $1 }' "$work/single.txt" | median)" \
  "($series series)"
echo "up:   /metrics single        median $(awk '{ print $2 }' "$work/single.txt" | median | ms) ms," \
  "max $(awk '{ print $2 }' "$work/single.txt" | max | ms) ms ($scrapes scrapes)"
echo "up:   /metrics 4 at once     median $(awk '{ print $2 }' "$work/concurrent.txt" | median | ms)" \
  "ms, max $(awk '{ print $2 }' "$work/concurrent.txt" | max | ms) ms ($rounds rounds)"
printf 'up:   router CPU per scrape  %.1f ms\n' \
  "$(calc "($cpu_after - $cpu_before) * 1000 / $hz / $scrapes")"
echo "up:   threads after scrapes  $(status_field "$serve" Threads)"
echo "up:   peak RSS (VmHWM)       $(($(status_field "$serve" VmHWM) / 1024)) MB"
stop_router
stop_engines

# --- late: the engines start late_s after the router ---
start_router late
down_until=$(calc "$(now) + $late_s")
while holds "$(now) < $down_until"; do sample_threads; sleep 0.02; done
down_threads=$peak_threads
start_engines || { echo "large_fleet: ports $base.. taken meanwhile" >&2; exit 1; }
start=$(now)
wait_ready "$start"
printf 'late: peak threads, engines down  %s (%s s)\n' "$down_threads" "$late_s"
printf 'late: ready after engines started %.2f s\n' "$(elapsed "$start")"
