#!/usr/bin/env bash
# A cancellation storm against real narwhal-sim producers: CLIENTS clients
# (200) whose requests each finish their prefill and then hang up while the
# router is still connecting their decode leg, once with handoff.release
# "pull" and once with "off". Prints, per mode, the handoffs still pinned on
# the producers (GET /sim/kv "held") a moment after the storm, with the
# router's abandoned / release counters.
#
#   tests/bench/cancel_storm.sh [BUILD_DIR]
#
# The window between prefill and decode is held open by STUCK consumers whose
# TCP accept queues are full (connects to them hang); one working consumer
# (d0, TOKEN_MS per token so a request takes a while) serves the requests
# placed on it and the releases. Placement takes the consumer with the fewest
# legs in flight, so most clients land on a stuck consumer and hang up
# between the legs; the others complete before HANG_UP_S (their handoffs are
# pulled by the decode).
# Environment: CLIENTS (200), STUCK (1), TOKEN_MS (60), HANG_UP_S (0.4),
# STAGGER_S (0.005).
set -euo pipefail
build="${1:-build}"
bin="$build/bin"
clients="${CLIENTS:-200}"
for b in narwhal-serve narwhal-sim; do
  [[ -x "$bin/$b" ]] || { echo "cancel_storm: $bin/$b missing (build it first)" >&2; exit 2; }
done
source "$(dirname "${BASH_SOURCE[0]}")/lib/scratch.sh"

wait_ready() {  # file
  for _ in $(seq 200); do grep -q ready "$1" 2>/dev/null && return 0; sleep 0.05; done
  echo "cancel_storm: no ready line in $1" >&2
  exit 1
}
start_sim() {  # id role [args...]
  "$bin/narwhal-sim" --port 0 --engine-id "$1" --role "$2" --threads 1024 "${@:3}" \
    >"$work/$1.out" 2>"$work/$1.err" &
  pids+=($!)
  wait_ready "$work/$1.out"
  grep -o 'port=[0-9]*' "$work/$1.out" | head -1 | cut -d= -f2
}
held() {  # port -> handoffs held
  curl -s "http://127.0.0.1:$1/sim/kv" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["held"]))'
}
metric() {  # http port, sample prefix -> value
  curl -s "http://127.0.0.1:$1/metrics" | awk -v m="$2" 'index($0, m) == 1 {print $2}' | head -1
}

# The stuck consumers: listening, never accepting, accept queues filled.
python3 - "$work/stuck.ports" "${STUCK:-1}" <<'PY' &
import socket, sys, time
keep, ports = [], []
for _ in range(int(sys.argv[2])):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(0)
    port = s.getsockname()[1]
    keep.append(s); ports.append(str(port))
    for _ in range(3):
        c = socket.socket(); c.setblocking(False)
        try: c.connect(("127.0.0.1", port))
        except BlockingIOError: pass
        keep.append(c)
time.sleep(0.1)
open(sys.argv[1], "w").write(" ".join(ports) + "\n")
time.sleep(3600)
PY
pids+=($!)
for _ in $(seq 100); do [[ -s "$work/stuck.ports" ]] && break; sleep 0.05; done
read -r -a stuck <"$work/stuck.ports"

run_mode() {  # release mode
  local mode="$1"
  local p0 p1 d0
  p0=$(start_sim "p0-$mode" prefill); p1=$(start_sim "p1-$mode" prefill)
  d0=$(start_sim "d0-$mode" decode --token-interval-ms "${TOKEN_MS:-60}")
  local stuck_engines=""
  for i in "${!stuck[@]}"; do
    stuck_engines+="{\"iid\": \"stuck$i\", \"url\": \"http://127.0.0.1:${stuck[$i]}\", \"role\": \"decode\"},"
  done
  cat >"$work/fleet-$mode.json" <<JSON
{"model": "Qwen/Qwen3-0.6B",
 "engines": [
   {"iid": "p0", "url": "http://127.0.0.1:$p0", "role": "prefill"},
   {"iid": "p1", "url": "http://127.0.0.1:$p1", "role": "prefill"},
   $stuck_engines
   {"iid": "d0", "url": "http://127.0.0.1:$d0", "role": "decode"}],
 "serving": {"max_attempts": 1},
 "engine": {"first_token_timeout_s": 10, "connect_timeout_s": 10},
 "recovery": {"eject_after": 1000000, "liveness_interval_s": 0},
 "handoff": {"release": "$mode"}}
JSON
  "$bin/narwhal-serve" --config "$work/fleet-$mode.json" --http 127.0.0.1:0 --grpc 127.0.0.1:0 \
    --admin 127.0.0.1:0 >"$work/serve-$mode.out" 2>"$work/serve-$mode.err" &
  local serve=$!
  pids+=("$serve")
  wait_ready "$work/serve-$mode.out"
  local http
  http=$(grep -o 'http=[^ ]*' "$work/serve-$mode.out" | cut -d= -f2 | cut -d: -f2)
  local curls=()
  for i in $(seq "$clients"); do
    curl -s -o /dev/null --max-time "${HANG_UP_S:-0.4}" -H 'Content-Type: application/json' \
      -d "{\"model\":\"Qwen/Qwen3-0.6B\",\"prompt\":\"storm $mode $i\",\"max_tokens\":4,\"stream\":true}" \
      "http://127.0.0.1:$http/v1/completions" &
    curls+=($!)
    sleep "${STAGGER_S:-0.005}"
  done
  wait "${curls[@]}" 2>/dev/null || true
  sleep 1
  local pinned=$(( $(held "$p0") + $(held "$p1") ))
  printf '%-5s clients=%d pinned=%d abandoned{cancelled}=%s released=%s dropped=%s off=%s\n' \
    "$mode" "$clients" "$pinned" \
    "$(metric "$http" 'narwhal_handoffs_abandoned_total{reason="cancelled"}')" \
    "$(metric "$http" 'narwhal_handoff_releases_total{outcome="released"}')" \
    "$(metric "$http" 'narwhal_handoff_releases_total{outcome="dropped"}')" \
    "$(metric "$http" 'narwhal_handoff_releases_total{outcome="off"}')"
}

echo "# cancel storm: $clients clients, hang-up after ${HANG_UP_S:-0.4}s, one every ${STAGGER_S:-0.005}s, ${#stuck[@]} stuck consumers"
run_mode pull
run_mode off
