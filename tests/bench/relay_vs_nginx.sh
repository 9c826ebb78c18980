#!/usr/bin/env bash
# Relay cost of narwhal-serve against Debian's nginx, in one run.
#
#   tests/bench/relay_vs_nginx.sh [--hold] [BUILD_DIR]      (BUILD_DIR: build)
#
# Starts two bench_engine processes (one prefill, one decode; cheap enough
# that the relay dominates), narwhal-serve in front of them, and nginx
# relaying the decode engine's SSE (deploy/bench/nginx.conf.template: one
# worker, proxy_buffering off, upstream keep-alive). Then drives the same
# workload for DURATION_S seconds each through
#   direct (P+D)    the engines directly: the bench runs prefill, then decode
#   direct decode   the decode engine directly, decode request only
#   nginx           nginx -> decode engine, decode request only (no prefill:
#                   nginx is a plain relay; compare with "direct decode")
#   narwhal HTTP    narwhal-serve's HTTP shim (prefill + decode legs)
#   narwhal gRPC    narwhal-serve's narwhal.v1.Inference/Generate
# and prints frames per relay CPU-second (CPU from /proc/PID/stat: the router
# process; nginx master + worker), the ratio to nginx, client TTFT p50/p99,
# the TTFT added over the matching direct run, the relay's and the load
# driver's CPU share (of one core) and errors.
#
# --hold (or HOLD=1): instead, STREAMS concurrent streams (default 4000) for
# DURATION_S (60) at TOKEN_MS (200) through the router's HTTP door and then
# its gRPC door (HOLD_GRPC=0 skips it), sampling the router's threads, RSS and
# open fds before, every SAMPLE_S seconds during, and AFTER_S seconds after
# the load, whether they returned to the baseline, and whether the router
# still answers GET /health (nginx is not started).
#
# Environment (defaults): STREAMS (256), TOKENS (256), TOKEN_MS (20),
# PROMPT_WORDS (512), DURATION_S (20), RAMP_S (1: workers start spread over
# it), API (completions, or chat), CONTINUATION (0; 1: the router runs with
# continuation enabled, so every decode asks for token ids and the router
# removes them from each chunk), PREFILL_MS (0), BENCH_THREADS (1),
# ENGINE_THREADS (1), GRPC_CHANNELS (4), ISOLATE (1), PRIORITIZE (0; 1 with
# --hold), SAMPLE_S (5), AFTER_S (5), KEEP_SCRATCH (0: the scratch directory
# and its logs are removed; they are kept when the script fails).
# IO_THREADS (unset: the router's default, one per core) sets the router's
# serving.io_threads, LOOP_PLACEMENT (unset: pack; or spread) its
# serving.loop_placement.
# ROWS (all five: direct direct_decode nginx http grpc) picks the rows to run
# (with --hold: the doors, http and grpc).
# Between runs it waits until the decode engine streams nothing.
#
# One machine stands in for separate hosts. ISOLATE=1 starts every process in
# its own session (setsid): with the kernel's scheduler autogroups on, CPU is
# shared per process rather than per thread. PRIORITIZE=1 runs the load
# driver and the engines (not the relays) under SCHED_FIFO priority 10 when
# that is permitted (root or CAP_SYS_NICE; the kernel's RT throttling still
# keeps 5% for everything else): a relay that saturates the cores, e.g. with
# thousands of threads, then cannot starve them, which would show up as late
# engines and a late client rather than as relay cost. It is on by default
# only for --hold, where a thread-per-stream relay can saturate both cores;
# its price is that RT wakeups preempt relay threads at once, which costs a
# relay with many contended threads more than an event loop. The bench's
# "lag" (p99 lateness of a 10 ms timer on its loop) shows whether it kept up;
# a warning is printed when it did not.
#
# Builds nothing: expects BUILD_DIR/bin/{narwhal-serve,narwhal-bench,bench_engine}.
# Everything listens on 127.0.0.1; every process started here is stopped on
# exit. On a shared, noisy machine compare the ratios within one run.
set -euo pipefail

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }

hold="${HOLD:-0}"
build=build
for arg in "$@"; do
  case "$arg" in
    --hold) hold=1 ;;
    -h | --help) usage; exit 0 ;;
    -*) echo "relay_vs_nginx: unknown option $arg" >&2; usage >&2; exit 2 ;;
    *) build="$arg" ;;
  esac
done
[[ "$hold" == 0 || "$hold" == 1 ]] || { echo "relay_vs_nginx: HOLD must be 0 or 1" >&2; exit 2; }

bin="$build/bin"
missing=()
for b in narwhal-serve narwhal-bench bench_engine; do
  [[ -x "$bin/$b" ]] || missing+=("$bin/$b")
done
if ((${#missing[@]})); then
  echo "relay_vs_nginx: missing ${missing[*]}" >&2
  echo "  build them first: cmake --build $build --target narwhal-serve narwhal-bench bench_engine" >&2
  exit 2
fi
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
template="$here/../../deploy/bench/nginx.conf.template"
nginx_bin="$(command -v nginx || echo /usr/sbin/nginx)"
if [[ "$hold" == 0 && ! -x "$nginx_bin" ]]; then
  echo "relay_vs_nginx: nginx not found (apt-get install nginx-light)" >&2
  exit 2
fi

if [[ "$hold" == 1 ]]; then
  STREAMS="${STREAMS:-4000}" TOKEN_MS="${TOKEN_MS:-200}" DURATION_S="${DURATION_S:-60}"
else
  STREAMS="${STREAMS:-256}" TOKEN_MS="${TOKEN_MS:-20}" DURATION_S="${DURATION_S:-20}"
fi
TOKENS="${TOKENS:-256}" PROMPT_WORDS="${PROMPT_WORDS:-512}" RAMP_S="${RAMP_S:-1}" API="${API:-completions}"
ROWS="${ROWS:-direct direct_decode nginx http grpc}"
want() { [[ " $ROWS " == *" $1 "* ]]; }
[[ "$API" == completions || "$API" == chat ]] || { echo "relay_vs_nginx: API must be completions or chat" >&2; exit 2; }
PREFILL_MS="${PREFILL_MS:-0}" BENCH_THREADS="${BENCH_THREADS:-1}"
ENGINE_THREADS="${ENGINE_THREADS:-1}" GRPC_CHANNELS="${GRPC_CHANNELS:-4}"
SAMPLE_S="${SAMPLE_S:-5}" AFTER_S="${AFTER_S:-5}" HOLD_GRPC="${HOLD_GRPC:-1}"
iso=()
[[ "${ISOLATE:-1}" != 0 ]] && command -v setsid >/dev/null && iso=(setsid)
prio=()
if [[ "${PRIORITIZE:-$hold}" != 0 ]] && command -v chrt >/dev/null && chrt -f 10 true 2>/dev/null; then
  prio=(chrt -f 10)
fi
for v in STREAMS TOKENS PROMPT_WORDS DURATION_S BENCH_THREADS ENGINE_THREADS GRPC_CHANNELS \
  SAMPLE_S AFTER_S; do
  [[ "${!v}" =~ ^[0-9]+$ && "${!v}" -gt 0 ]] || { echo "relay_vs_nginx: $v must be a positive integer" >&2; exit 2; }
done
((DURATION_S <= 600)) || { echo "relay_vs_nginx: DURATION_S is capped at 600" >&2; exit 2; }

# Each stream holds a socket in the bench, the engine and (twice) the relay.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
if (($(ulimit -n) < 2 * STREAMS + 256)); then
  echo "relay_vs_nginx: warning: open-file limit $(ulimit -n) is low for $STREAMS streams" >&2
fi

scratch="$(mktemp -d "${TMPDIR:-/tmp}/relay_vs_nginx.XXXXXX")"
pids=()
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  local p
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for _ in $(seq 50); do  # up to 5 s for a clean exit, then SIGKILL
    local alive=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    ((alive)) || break
    sleep 0.1
  done
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [[ "${KEEP_SCRATCH:-0}" == 1 || $rc -ne 0 ]]; then
    echo "# logs kept in $scratch" >&2
  else
    rm -rf "$scratch"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# A sleep without a child process (for the background sampler).
mkfifo "$scratch/.tick"
exec 9<>"$scratch/.tick"
pause() { read -r -t "$1" -u 9 _ || true; }

die() {
  echo "relay_vs_nginx: $*" >&2
  exit 1
}

# wait_line FILE PATTERN PID SECONDS: until FILE has a line matching PATTERN.
wait_line() {
  local i
  for ((i = 0; i < $4 * 20; i++)); do
    grep -q "$2" "$1" 2>/dev/null && return 0
    kill -0 "$3" 2>/dev/null || die "$(basename "$1" .out) exited early: $(tail -n 3 "${1%.out}.err" 2>/dev/null)"
    sleep 0.05
  done
  die "no \"$2\" from $(basename "$1" .out) within $4 s"
}

last_pid=0
start_engine() {  # ID -> sets last_pid; the port is in $scratch/ID.out
  "${prio[@]}" "${iso[@]}" "$bin/bench_engine" --port 0 --engine-id "$1" --token-interval-ms "$TOKEN_MS" \
    --prefill-ms "$PREFILL_MS" --threads "$ENGINE_THREADS" >"$scratch/$1.out" 2>"$scratch/$1.err" &
  last_pid=$!
  pids+=("$last_pid")
  wait_line "$scratch/$1.out" "bench_engine ready" "$last_pid" 10
}

start_engine p0
p0_pid=$last_pid
p0_port=$(grep -o 'port=[0-9]*' "$scratch/p0.out" | cut -d= -f2)
start_engine d0
d0_pid=$last_pid
d0_port=$(grep -o 'port=[0-9]*' "$scratch/d0.out" | cut -d= -f2)

io_threads_json=""
[[ -n "${IO_THREADS:-}" ]] && io_threads_json=", \"io_threads\": $IO_THREADS"
if [[ -n "${LOOP_PLACEMENT:-}" ]]; then
  [[ "$LOOP_PLACEMENT" == pack || "$LOOP_PLACEMENT" == spread ]] ||
    { echo "relay_vs_nginx: LOOP_PLACEMENT must be pack or spread" >&2; exit 2; }
  io_threads_json+=", \"loop_placement\": \"$LOOP_PLACEMENT\""
fi
cat >"$scratch/fleet.json" <<JSON
{"model": "Qwen/Qwen3-0.6B",
 "engines": [
   {"iid": "p0", "url": "http://127.0.0.1:$p0_port", "role": "prefill"},
   {"iid": "d0", "url": "http://127.0.0.1:$d0_port", "role": "decode"}],
 "serving": {"max_inflight": $((STREAMS + 64)), "max_connections": $((STREAMS > 4032 ? STREAMS + 64 : 4096))$io_threads_json},
 "continuation": {"enabled": $([ "${CONTINUATION:-0}" = 1 ] && echo true || echo false)},
 "engine": {"first_token_timeout_s": 30, "decode_read_timeout_s": 30}}
JSON
"${iso[@]}" "$bin/narwhal-serve" --config "$scratch/fleet.json" --http 127.0.0.1:0 --grpc 127.0.0.1:0 \
  --admin 127.0.0.1:0 >"$scratch/serve.out" 2>"$scratch/serve.err" &
serve_pid=$!
pids+=("$serve_pid")
wait_line "$scratch/serve.out" "narwhal-serve ready" "$serve_pid" 30
http_addr=$(grep -o 'http=[^ ]*' "$scratch/serve.out" | cut -d= -f2)
grpc_addr=$(grep -o 'grpc=[^ ]*' "$scratch/serve.out" | cut -d= -f2)
if command -v curl >/dev/null; then
  for _ in $(seq 100); do
    [[ "$(curl -s -o /dev/null -w '%{http_code}' "http://$http_addr/ready")" == 200 ]] && break
    sleep 0.1
  done
fi

nginx_pids=""
start_nginx() {  # tries a few ports below the ephemeral range
  local user_line="" port attempt master worker i
  [[ $EUID -eq 0 ]] && user_line="user $(id -un) $(id -gn);"
  mkdir -p "$scratch/nginx-tmp"
  for ((attempt = 0; attempt < 20; attempt++)); do
    port=$((20000 + (RANDOM % 12000)))
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && continue  # taken
    sed -e "s|@SCRATCH@|$scratch|g" -e "s|@LISTEN_PORT@|$port|g" \
      -e "s|@UPSTREAM_PORT@|$d0_port|g" -e "s|@USER_LINE@|$user_line|g" \
      "$template" >"$scratch/nginx.conf"
    : >"$scratch/nginx-error.log"
    "${iso[@]}" "$nginx_bin" -p "$scratch/" -e "$scratch/nginx-error.log" -c "$scratch/nginx.conf" \
      >"$scratch/nginx.out" 2>&1 &
    master=$!
    pids+=("$master")
    for ((i = 0; i < 100; i++)); do
      worker=$(cat "/proc/$master/task/$master/children" 2>/dev/null || true)
      worker=${worker%% *}
      if [[ -n "$worker" ]] && (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
        nginx_port=$port
        nginx_pids="$master,$worker"
        pids+=("$worker")  # after the master, so the master stops it first
        return 0
      fi
      kill -0 "$master" 2>/dev/null || break
      sleep 0.05
    done
    kill -TERM "$master" 2>/dev/null || true
    wait "$master" 2>/dev/null || true
    grep -q "Address already in use" "$scratch/nginx-error.log" "$scratch/nginx.out" || break
  done
  die "nginx did not start: $(tail -n 3 "$scratch/nginx-error.log" "$scratch/nginx.out")"
}

# bench NAME ARGS...: one narwhal-bench run (bounded), JSON in $scratch/NAME.json.
bench() {
  local name=$1
  shift
  echo "# $name ..." >&2
  # In the background, so that a signal to this script is handled at once.
  timeout -k 5 $((DURATION_S + 60)) "${prio[@]}" "${iso[@]}" "$bin/narwhal-bench" --concurrency "$STREAMS" \
    --duration-s "$DURATION_S" --ramp-s "$RAMP_S" --max-tokens "$TOKENS" \
    --prompt-words "$PROMPT_WORDS" --threads "$BENCH_THREADS" --grpc-channels "$GRPC_CHANNELS" \
    --api "$API" --json "$@" >"$scratch/$name.json" 2>"$scratch/$name.err" &
  local bench_pid=$!
  pids+=("$bench_pid")
  wait "$bench_pid" || true
  [[ -s "$scratch/$name.json" ]] || {
    echo "relay_vs_nginx: $name produced no report: $(tail -n 3 "$scratch/$name.err")" >&2
    echo '{"requests_ok":0,"requests_failed":-1,"first_error":"no report"}' >"$scratch/$name.json"
  }
}

# Waits (up to 20 s) until the decode engine streams nothing: the streams cut
# at the end of a run must be gone before the next run starts.
settle() {
  local i running
  if ! command -v curl >/dev/null; then
    pause 2
    return
  fi
  for ((i = 0; i < 200; i++)); do
    running=$(curl -s --max-time 2 "http://127.0.0.1:$d0_port/metrics" |
      sed -n 's/^vllm:num_requests_running{[^}]*} \([0-9]*\)$/\1/p')
    [[ "$running" == 0 ]] && { pause 0.5; return; }
    pause 0.1
  done
  echo "# warning: the decode engine still streams $running requests 20 s after the run" >&2
}

lag_warning() {  # NAME FILE: when the bench's own loop fell behind
  local lag
  lag=$(jnum "$2" loop_lag_p99_ms)
  if [[ -n "$lag" ]] && awk "BEGIN { exit !($lag > 50) }"; then
    echo "# warning ($1): the load driver's loop lagged (p99 $(calc "$lag" "%.0f") ms): the cores" \
      "were saturated and its numbers are partly its own delay (PRIORITIZE=1 gives it RT priority)"
  fi
}

jnum() {  # FILE KEY -> the number (or empty)
  sed -n "s/.*\"$2\":\(-\{0,1\}[0-9.e+-]*\).*/\1/p" "$1" | head -n 1
}
jerr() { sed -n 's/.*"first_error":"\(.*\)"}$/\1/p' "$1" | head -n 1 | sed 's/\\"/"/g'; }
calc() { awk "BEGIN { x = $1; printf(\"$2\", x) }" 2>/dev/null || echo "-"; }

echo "# $(date -u +%FT%TZ) $(nproc) cores; $API API; streams=$STREAMS tokens=$TOKENS token_ms=$TOKEN_MS" \
  "prompt_words=$PROMPT_WORDS duration=${DURATION_S}s ramp=${RAMP_S}s bench_threads=$BENCH_THREADS"
echo "# own sessions (ISOLATE): ${iso[*]:-no}; bench and engines at: ${prio[*]:-normal priority}" \
  "(PRIORITIZE)"
echo "# engines p0:$p0_port (pid $p0_pid) d0:$d0_port (pid $d0_pid); narwhal-serve pid $serve_pid" \
  "http=$http_addr grpc=$grpc_addr"

if [[ "$hold" == 0 ]]; then
  start_nginx
  echo "# nginx $("$nginx_bin" -v 2>&1 | sed 's/.*: //') on 127.0.0.1:$nginx_port (pids $nginx_pids)"
  want direct &&
    bench direct --mode direct --prefill "http://127.0.0.1:$p0_port" --decode "http://127.0.0.1:$d0_port" &&
    settle
  want direct_decode && bench direct_decode --mode decode-only --target "127.0.0.1:$d0_port" && settle
  want nginx && bench nginx --mode decode-only --target "127.0.0.1:$nginx_port" --pid "$nginx_pids" &&
    settle
  want http && bench http --mode http --target "$http_addr" --pid "$serve_pid" && settle
  want grpc && bench grpc --mode grpc --target "$grpc_addr" --pid "$serve_pid"

  s="$scratch"
  nginx_fpc=""
  [[ -f "$s/nginx.json" ]] && nginx_fpc=$(jnum "$s/nginx.json" frames_per_relay_cpu_s)
  # shellcheck disable=SC2059  # one format for the header and the rows
  fmt="%-14s %12s %8s %9s %9s %17s %9s %9s %8s %9s %6s %s\n"
  echo
  printf "$fmt" relay "frames/cpu-s" "vs nginx" "TTFT p50" "TTFT p99" "added p50/p99" \
    "relay cpu" "bench cpu" "lag p99" "frames/s" errors ""
  row() {  # LABEL NAME BASELINE
    local f="$s/$2.json" b="$s/$3.json" fpc p50 p99 added="-" vs="-" fpcs="-" rcpu="-"
    [[ -f "$f" ]] || return 0  # not in ROWS
    fpc=$(jnum "$f" frames_per_relay_cpu_s)
    p50=$(jnum "$f" ttft_p50_ms)
    p99=$(jnum "$f" ttft_p99_ms)
    if [[ -n "$fpc" ]]; then
      fpcs=$(calc "$fpc" "%.0f")
      rcpu=$(calc "100 * $(jnum "$f" relay_cpu_share)" "%.0f%%")
      [[ -n "$nginx_fpc" ]] && vs=$(calc "$fpc / $nginx_fpc" "%.2fx")
    fi
    if [[ "$3" != - && -f "$b" && -n "$p50" ]]; then
      added="$(calc "$p50 - $(jnum "$b" ttft_p50_ms)" "%+.1f")/$(calc "$p99 - $(jnum "$b" ttft_p99_ms)" "%+.1f")ms"
    fi
    printf "$fmt" "$1" "$fpcs" "$vs" "$(calc "${p50:-0}" "%.1fms")" "$(calc "${p99:-0}" "%.1fms")" \
      "$added" "$rcpu" "$(calc "100 * $(jnum "$f" bench_cpu_share)" "%.0f%%")" \
      "$(calc "$(jnum "$f" loop_lag_p99_ms)" "%.1fms")" \
      "$(calc "$(jnum "$f" frames_per_s)" "%.0f")" "$(jnum "$f" requests_failed)" \
      "ok=$(jnum "$f" requests_ok) cut=$(jnum "$f" requests_cut)"
  }
  row "direct (P+D)" direct -
  row "direct decode" direct_decode -
  row "nginx" nginx direct_decode
  row "narwhal HTTP" http direct
  row "narwhal gRPC" grpc direct
  echo "# frames/cpu-s: generated-token frames per CPU-second of the relay (router process;"
  echo "#   nginx master+worker); added: TTFT over direct (P+D) for narwhal, over direct decode"
  echo "#   for nginx; cpu columns: share of one core over the window; lag: p99 lateness of a"
  echo "#   10 ms timer on the bench's loop (gRPC: on its callback threads); bench cpu and lag"
  echo "#   show whether the load driver kept up; errors: failed requests (cut: in flight at"
  echo "#   the end, counted as neither)."
  for n in direct direct_decode nginx http grpc; do
    [[ -f "$s/$n.json" ]] || continue
    e=$(jerr "$s/$n.json")
    [[ -n "$e" ]] && echo "# first error ($n): $e"
    lag_warning "$n" "$s/$n.json"
  done
  exit 0
fi

# --- hold: many long-lived streams, and the router's resources around them ---
sample() {  # PHASE -> one line: phase threads rss_kb fds ("-" once the router is gone)
  local threads="-" rss="-" key value rest fds
  if ! [[ -r "/proc/$serve_pid/status" ]]; then
    echo "$1 - - -"
    return
  fi
  while read -r key value rest; do
    case "$key" in
      Threads:) threads=$value ;;
      VmRSS:) rss=$value ;;
    esac
  done <"/proc/$serve_pid/status"
  fds=(/proc/"$serve_pid"/fd/*)
  echo "$1 $threads $rss ${#fds[@]}"
}
now_ms() { now=$((${EPOCHREALTIME/./} / 1000)); }  # sets $now (wall clock, ms)
pause_until() {  # MS: sleeps until that wall-clock time
  local now left frac
  now_ms
  left=$(($1 - now))
  ((left > 0)) || return 0
  printf -v frac %03d $((left % 1000))
  pause "$((left / 1000)).$frac"
}
# Every SAMPLE_S during the window, labelled with the time actually elapsed:
# a saturated machine delays this shell too.
sampler() {  # OUT START_MS
  local i now n=$((DURATION_S / SAMPLE_S + 2))
  for ((i = 1; i <= n; i++)); do
    pause_until $(($2 + i * SAMPLE_S * 1000))
    now_ms
    ((now - $2 < DURATION_S * 1000)) || break
    sample "during+$(((now - $2) / 1000))s" >>"$1"
  done
}
report_hold() {  # DOOR
  local f="$scratch/$1.json" samples="$scratch/$1.samples"
  echo
  echo "## narwhal $1 door: $STREAMS streams x $TOKENS tokens at ${TOKEN_MS} ms for ${DURATION_S}s"
  echo "   ok=$(jnum "$f" requests_ok) failed=$(jnum "$f" requests_failed) cut=$(jnum "$f" requests_cut)" \
    "(of which before their first token: $(jnum "$f" cut_before_first_token)," \
    "while connecting: $(jnum "$f" cut_while_connecting))" \
    "frames/s=$(calc "$(jnum "$f" frames_per_s)" "%.0f")" \
    "frames/relay-cpu-s=$(calc "$(jnum "$f" frames_per_relay_cpu_s)" "%.0f")" \
    "relay cpu=$(calc "100 * $(jnum "$f" relay_cpu_share)" "%.0f%%")" \
    "TTFT p50=$(calc "$(jnum "$f" ttft_p50_ms)" "%.1f")ms p99=$(calc "$(jnum "$f" ttft_p99_ms)" "%.1f")ms" \
    "bench cpu=$(calc "100 * $(jnum "$f" bench_cpu_share)" "%.0f%%")" \
    "bench lag p99=$(calc "$(jnum "$f" loop_lag_p99_ms)" "%.1f")ms"
  local e
  e=$(jerr "$f")
  [[ -n "$e" ]] && echo "   first error: $e"
  lag_warning "$1" "$f"
  printf "   %-14s %8s %10s %7s\n" phase threads "RSS MB" fds
  local phase threads rss fds
  while read -r phase threads rss fds; do
    printf "   %-14s %8s %10s %7s\n" "$phase" "$threads" "$(calc "${rss/-/0} / 1024" "%.1f")" "$fds"
  done <"$samples"
  local t0 r0 f0 t1 r1 f1 vt=ok vf=ok vr=ok
  read -r _ t0 r0 f0 < <(head -n 1 "$samples")
  read -r _ t1 r1 f1 < <(tail -n 1 "$samples")
  [[ "$t0$r0$f0" =~ ^[0-9]+$ ]] || { t0=0 r0=0 f0=0; }  # the router was gone before
  [[ "$t1" =~ ^[0-9]+$ && "$t1" -le $((t0 + 8)) ]] || { vt=no; [[ "$t1" =~ ^[0-9]+$ ]] || t1=0; }
  [[ "$f1" =~ ^[0-9]+$ && "$f1" -le $((f0 + 8)) ]] || { vf=no; [[ "$f1" =~ ^[0-9]+$ ]] || f1=0; }
  [[ "$r1" =~ ^[0-9]+$ && "$r1" -le $((r0 + r0 / 4 + 16384)) ]] || { vr=no; [[ "$r1" =~ ^[0-9]+$ ]] || r1=0; }
  local verdict=yes
  [[ "$vt$vf$vr" == okokok ]] || verdict=no
  echo "   back to baseline ${AFTER_S}s after the load: $verdict (threads $((t1 - t0)) $vt," \
    "fds $((f1 - f0)) $vf, RSS $(calc "($r1 - $r0) / 1024" "%+.1f") MB $vr;" \
    "tolerance: threads +8, fds +8, RSS +25% +16 MB)"
  echo "   router GET /health then: $health"
}

doors=()
want http && doors+=(http)
[[ "$HOLD_GRPC" == 1 ]] && want grpc && doors+=(grpc)
for door in "${doors[@]}"; do
  samples="$scratch/$door.samples"
  sample before >"$samples"
  now_ms
  sampler "$samples" "$now" &
  sampler_pid=$!
  pids+=("$sampler_pid")
  if [[ "$door" == http ]]; then
    bench http --mode http --target "$http_addr" --pid "$serve_pid"
  else
    bench grpc --mode grpc --target "$grpc_addr" --pid "$serve_pid"
  fi
  now_ms
  load_end=$now
  wait "$sampler_pid" 2>/dev/null || true
  pause_until $((load_end + AFTER_S * 1000))
  now_ms
  sample "after+$(((now - load_end) / 1000))s" >>"$samples"
  health="not checked (no curl)"
  if command -v curl >/dev/null; then
    health=$(curl -s -o /dev/null --max-time 3 -w '%{http_code} in %{time_total}s' \
      "http://$http_addr/health" || true)
    [[ "$health" == 000* ]] && health="no answer within 3 s"
  fi
  report_hold "$door"
  settle  # before the next door
done
