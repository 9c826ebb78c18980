#!/usr/bin/env python3
"""KV-event placement benchmark: six router configurations, one request sequence.

Compares placement.prefill in {least_loaded, cache_aware, kv_events} crossed
with placement.disaggregate in {always, auto} on a multi-turn chat workload:
SYSTEMS shared system prompts, CONVERSATIONS conversations of 5-6 turns whose
prompts grow by the previous reply and a new user message each turn, run by
CONCURRENCY client threads (a conversation's turns strictly in order).

Per configuration a fresh fleet (2 prefill + 2 decode narwhal-sim engines with
a bounded prefix cache, KV-event publishers and replay sockets, prefill latency
per uncached token) and a fresh narwhal-serve, so every configuration starts
from empty, equal caches. After about 40% of the requests one prefill engine is
killed (SIGKILL) and started again on the same ports: its cache is gone, which
the router's text index cannot see and its KV-event subscriber can.

Each turn sends the whole conversation back (system prompt, user messages and
the replies exactly as streamed); a failed turn goes on with the reply the sim
would have given (recomputed here from its generator), so the sequence stays
the same for every configuration.

Reported per configuration: prefill tokens computed across the fleet (prompt
tokens looked up minus cached tokens, from GET /sim/prefix_cache on all four
engines, the killed instance's last reading included; also the part computed
after the restart), client TTFT (time to the first content event of a
streaming request) p50/p99, requests per second, failures, the share of
requests that ran on their decode engine without a prefill leg
(local_prefill), and from the router's /metrics its placement decisions,
tokenize failures, KV-event gaps and skipped blocks.

  tests/bench/kv_placement_bench.py [--build build] [--conversations 40]
      [--turns 6] [--concurrency 10] [--seed 7] [--json] [--journal-dir DIR]
      [--restart-at 0.4 (0: none)] [--only kv_events/auto,...]
      [--index-chunks N] [--max-attempts N]
"""
import argparse
import http.client
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

MODEL = "Qwen/Qwen3-0.6B"
CHARS_PER_TOKEN = 4     # the sim's tokenizer
BLOCK_TOKENS = 16       # the sim's prefix-cache block
BLOCK_CHARS = CHARS_PER_TOKEN * BLOCK_TOKENS
ENGINES = (("p0", "prefill"), ("p1", "prefill"), ("d0", "decode"), ("d1", "decode"))
CONFIGS = [(p, d) for p in ("least_loaded", "cache_aware", "kv_events") for d in ("always", "auto")]


# The process and HTTP helpers of the prefill placement benchmark.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from placement_bench import http_json, metric_values, percentile, start  # noqa: E402


# --- the sim's reply, recomputed (engines/sim/text_gen.h) ---

SIM_VOCAB = ("the river stone light quiet north whale tide harbor signal cold bright deep "
             "current shore wind salt drift silver moon wave reef ice song path field cloud "
             "storm island pod blue fjord echo slow swift calm open far near under over and "
             "of to in a with from into across beyond distant old new long small great clear "
             "dark warm green gray white red").split()
SIM_VOCABULARY = 151643  # the tokenizer's ids; generated word w has id SIM_VOCABULARY + w
FNV_OFFSET = 14695981039346656037
FNV_PRIME = 1099511628211
MASK64 = (1 << 64) - 1


def fnv1a(h, data):
    for byte in data:
        h = ((h ^ byte) * FNV_PRIME) & MASK64
    return h


def sim_tokenize(text):
    """The sim's tokenizer: one id per 4 bytes, FNV-1a of them % SIM_VOCABULARY."""
    data = text.encode()
    return [fnv1a(FNV_OFFSET, data[at:at + CHARS_PER_TOKEN]) % SIM_VOCABULARY
            for at in range(0, len(data), CHARS_PER_TOKEN)]


def absorb(h, token_id):
    """FNV-1a over the id's 4 little-endian bytes."""
    return fnv1a(h, token_id.to_bytes(4, "little"))


def splitmix64(x):
    z = (x + 0x9E3779B97F4A7C15) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def sim_reply(prompt, count):
    """The text the sim streams for the text `prompt`: generated word j is
    splitmix64(state) % 64, the state absorbing the prompt's ids and then
    every generated id (SIM_VOCABULARY + word)."""
    state = FNV_OFFSET
    for token_id in sim_tokenize(prompt):
        state = absorb(state, token_id)
    words = []
    for _ in range(count):
        word = splitmix64(state) % len(SIM_VOCAB)
        words.append(" " + SIM_VOCAB[word])
        state = absorb(state, SIM_VOCABULARY + word)
    return "".join(words)


# --- workload ---

def words(rng, n_chars, head):
    """`head` then words up to exactly n_chars characters (a multiple of 4)."""
    vocab = ("narwhal tusk arctic whale ocean ice pod dive krill fjord migration sonar current "
             "depth cold water light season tide shelf question answer explain compare summary "
             "detail reason example plan route engine cache block token latency").split()
    text = head
    while len(text) < n_chars:
        text += " " + rng.choice(vocab)
    return text[:n_chars]


def workload(args):
    """Conversations: {system, users[], replies[]} with the replies the sim
    will produce (the same for every configuration)."""
    rng = random.Random(args.seed)
    sys_chars = args.system_tokens * CHARS_PER_TOKEN
    systems = [words(rng, sys_chars, "System prompt %d. You are assistant number %d." % (i, i))
               for i in range(args.systems)]
    convs = []
    for c in range(args.conversations):
        turns = rng.choice((args.turns - 1, args.turns)) if args.turns > 1 else 1
        system = rng.randrange(args.systems)
        users = []
        for t in range(turns):
            n_tokens = rng.randint(args.user_tokens_min, args.user_tokens_max)
            users.append(words(rng, n_tokens * CHARS_PER_TOKEN,
                               " Conversation %d turn %d:" % (c, t)))
        convs.append({"id": c, "system": system, "users": users})
    # The expected replies, turn by turn (a reply depends on the whole prompt).
    for conv in convs:
        prompt = systems[conv["system"]]
        conv["replies"] = []
        for user in conv["users"]:
            prompt += user
            reply = sim_reply(prompt, args.max_tokens)
            conv["replies"].append(reply)
            prompt += reply
        conv["final_text"] = prompt
    return systems, convs


def working_set_blocks(systems, convs):
    """Unique full 16-token (64-character) blocks, as the sim's prefix chains
    over token ids, of every system prompt and every conversation's final
    text (last reply included)."""
    keys = set()
    for text in list(systems) + [c["final_text"] for c in convs]:
        ids = sim_tokenize(text)
        h = FNV_OFFSET
        for k in range(len(ids) // BLOCK_TOKENS):
            for token_id in ids[k * BLOCK_TOKENS:(k + 1) * BLOCK_TOKENS]:
                h = absorb(h, token_id)
            keys.add(h)
    return len(keys)


# --- client ---

def stream_chat(host, port, messages, max_tokens):
    """Returns (ttft_s, ok, reply text)."""
    body = {"model": MODEL, "messages": messages, "max_tokens": max_tokens, "stream": True}
    start_t = time.perf_counter()
    conn = http.client.HTTPConnection(host, port, timeout=60)
    try:
        conn.request("POST", "/v1/chat/completions", body=json.dumps(body),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            resp.read()
            return None, False, ""
        ttft = None
        done = False
        parts = []
        while True:
            line = resp.readline()
            if not line:
                break
            if not line.startswith(b"data: "):
                continue
            payload = line[6:].strip()
            if payload == b"[DONE]":
                done = True
                break
            chunk = json.loads(payload)
            if "error" in chunk:
                break
            choices = chunk.get("choices") or []
            text = (choices[0].get("delta") or {}).get("content") if choices else None
            if text:
                if ttft is None:
                    ttft = time.perf_counter() - start_t
                parts.append(text)
        return ttft, done and ttft is not None, "".join(parts)
    except (OSError, http.client.HTTPException, ValueError):
        return None, False, ""
    finally:
        conn.close()


def drive(host, ports, systems, convs, concurrency, max_tokens, on_progress):
    """Runs every conversation, turns in order; on_progress(done_requests)
    after each request. With several routers (`ports`), turn t of
    conversation c goes to router (c + t) % len(ports), as a load balancer in
    front of router replicas spreads them. Returns (ttfts, failed,
    mismatched, wall_s)."""
    ttfts = []
    failed = [0]
    mismatched = [0]
    done = [0]
    lock = threading.Lock()
    cursor = [0]

    def worker():
        while True:
            with lock:
                i = cursor[0]
                cursor[0] += 1
            if i >= len(convs):
                return
            conv = convs[i]
            messages = [{"role": "system", "content": systems[conv["system"]]}]
            for turn, (user, expected) in enumerate(zip(conv["users"], conv["replies"])):
                messages.append({"role": "user", "content": user})
                port = ports[(i + turn) % len(ports)]
                ttft, ok, reply = stream_chat(host, port, messages, max_tokens)
                with lock:
                    if ok:
                        ttfts.append(ttft)
                        if reply != expected:
                            mismatched[0] += 1
                    else:
                        failed[0] += 1
                    done[0] += 1
                    n = done[0]
                # The reply as received; a failed turn goes on with the reply
                # the engine would have given, so the sequence stays the same.
                messages.append({"role": "assistant", "content": reply if ok else expected})
                on_progress(n)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return ttfts, failed[0], mismatched[0], time.perf_counter() - t0


def label(labels, key):
    m = re.search(key + r'="([^"]*)"', labels)
    return m.group(1) if m else ""


# --- fleet ---

class Fleet:
    """The four engines of one configuration."""

    def __init__(self, binary, work, tag, args):
        self.binary, self.work, self.tag, self.args = binary, work, tag, args
        self.procs = {}
        self.ports = {}      # iid -> (http, kv, replay)
        self.dead_stats = []  # prefix-cache stats of killed instances
        self.at_restart = None  # every engine's stats just before the kill
        self.restart_s = None

    def sim_cmd(self, iid, role, port, kv_port, replay_port):
        a = self.args
        return [os.path.join(self.binary, "narwhal-sim"), "--port", str(port),
                "--engine-id", iid, "--role", role,
                "--token-interval-ms", str(a.token_interval_ms),
                "--threads", "128",
                "--prefix-cache-blocks", str(a.cache_blocks),
                "--prefill-ms-per-1k-tokens", str(a.prefill_ms_per_1k),
                "--prefill-lanes", "1",
                "--kv-transfer-ms", str(a.kv_transfer_ms),
                "--kv-events-port", str(kv_port), "--kv-events-replay-port", str(replay_port)]

    def start_one(self, iid, role, port=0, kv_port=0, replay_port=0, n=0):
        base = os.path.join(self.work, "%s-%s.%d" % (self.tag, iid, n))
        proc, m = start(self.sim_cmd(iid, role, port, kv_port, replay_port),
                        base + ".out", base + ".err", r"ready port=(\d+)")
        self.procs[iid] = proc
        http_port = int(m.group(1))
        info = json.loads(http_json("127.0.0.1", http_port, "GET", "/sim/info")[1])
        self.ports[iid] = (http_port, info["kv_events_port"], info["kv_events_replay_port"])

    def start(self):
        for iid, role in ENGINES:
            self.start_one(iid, role)

    def restart(self, iid, role):
        """SIGKILL `iid` (its cache stats read just before) and start a fresh
        instance on the same HTTP and KV ports."""
        t0 = time.perf_counter()
        http_port, kv_port, replay_port = self.ports[iid]
        others = {o: json.loads(http_json("127.0.0.1", self.ports[o][0], "GET",
                                          "/sim/prefix_cache")[1]) for o, _ in ENGINES if o != iid}
        last = json.loads(http_json("127.0.0.1", http_port, "GET", "/sim/prefix_cache")[1])
        self.dead_stats.append(last)
        self.at_restart = dict(others, **{iid: last})
        proc = self.procs[iid]
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        error = None
        for n in range(1, 40):  # the ports may take a moment to free
            try:
                self.start_one(iid, role, http_port, kv_port, replay_port, n)
                break
            except RuntimeError as e:
                error = e
                time.sleep(0.1)
        else:
            raise RuntimeError("restart of %s failed: %s" % (iid, error))
        self.restart_s = time.perf_counter() - t0

    def stats(self):
        return {iid: json.loads(http_json("127.0.0.1", self.ports[iid][0], "GET",
                                          "/sim/prefix_cache")[1]) for iid, _ in ENGINES}

    def stop(self):
        for p in self.procs.values():
            if p.poll() is None:
                p.terminate()
        for p in self.procs.values():
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def run_config(binary, work, args, prefill, disaggregate, systems, convs, total_requests):
    tag = "%s-%s" % (prefill, disaggregate)
    fleet = Fleet(binary, work, tag, args)
    serves = []
    try:
        fleet.start()
        cfg = {
            "model": MODEL,
            "engines": [{"iid": iid, "url": "http://127.0.0.1:%d" % fleet.ports[iid][0],
                         "role": role,
                         "kv_events": "tcp://127.0.0.1:%d" % fleet.ports[iid][1],
                         "kv_events_replay": "tcp://127.0.0.1:%d" % fleet.ports[iid][2]}
                        for iid, role in ENGINES],
            "engine": {"first_token_timeout_s": 30, "decode_read_timeout_s": 30},
            "placement": {"prefill": prefill, "disaggregate": disaggregate,
                          "min_uncached_tokens": args.min_uncached_tokens,
                          "imbalance_abs": args.imbalance_abs},
            "kv_events": {"block_size": BLOCK_TOKENS, "tokenizer": "engine",
                          "tokenize_timeout_s": 0.5},
        }
        if args.index_chunks != 0:
            cfg["placement"]["index_chunks"] = (args.index_chunks if args.index_chunks > 0
                                                else max(1, args.cache_blocks // 4))
        if args.max_attempts:
            cfg["serving"] = {"max_attempts": args.max_attempts}
        cfg_path = os.path.join(work, "fleet-%s.json" % tag)
        json.dump(cfg, open(cfg_path, "w"), indent=1)
        ports = []
        for r in range(args.routers):
            name = tag if args.routers == 1 else "%s-r%d" % (tag, r)
            cmd = [os.path.join(binary, "narwhal-serve"), "--config", cfg_path,
                   "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--admin", "127.0.0.1:0"]
            if args.journal_dir:
                os.makedirs(args.journal_dir, exist_ok=True)
                cmd += ["--journal", os.path.join(args.journal_dir, "journal-%s.jsonl" % name)]
            serve, m = start(cmd, os.path.join(work, "serve-%s.out" % name),
                             os.path.join(work, "serve-%s.err" % name),
                             r"ready http=127\.0\.0\.1:(\d+)")
            serves.append(serve)
            port = int(m.group(1))
            ports.append(port)
            deadline = time.time() + 10
            while time.time() < deadline:
                try:
                    if http_json("127.0.0.1", port, "GET", "/ready")[0] == 200:
                        break
                except OSError:
                    pass
                time.sleep(0.1)
        # Let the KV-event subscriptions connect before the first store.
        time.sleep(args.settle_s)

        kill_at = max(1, int(round(args.restart_at * total_requests)))
        restart_done = threading.Event()
        restart_error = []

        def restart():
            try:
                fleet.restart("p0", "prefill")
            except Exception as e:  # reported, the run goes on
                restart_error.append(str(e))
            restart_done.set()

        fired = [False]
        fire_lock = threading.Lock()

        def on_progress(n):
            with fire_lock:
                if fired[0] or n < kill_at or not 0 < args.restart_at < 1:
                    return
                fired[0] = True
            threading.Thread(target=restart).start()

        ttfts, failed, mismatched, wall = drive("127.0.0.1", ports, systems, convs,
                                                args.concurrency, args.max_tokens, on_progress)
        if fired[0]:
            restart_done.wait(timeout=30)
        # Every router's series, one after the other (the counters add up).
        text = "".join(http_json("127.0.0.1", p, "GET", "/metrics")[1].decode() for p in ports)
        stats = fleet.stats()
    finally:
        for serve in serves:
            serve.terminate()
            try:
                serve.wait(timeout=30)
            except subprocess.TimeoutExpired:
                serve.kill()
                serve.wait()
        fleet.stop()

    decisions = {}
    for labels, v in metric_values(text, "narwhal_placement_decisions_total").items():
        if v > 0:
            decisions["%s/%s" % (label(labels, "phase"), label(labels, "reason"))] = int(v)
    tokenize_failures = {label(k, "reason"): int(v) for k, v in
                         metric_values(text, "narwhal_kv_tokenize_failures_total").items() if v > 0}
    gaps = {}
    for labels, v in metric_values(text, "narwhal_kv_event_gaps_total").items():
        if v > 0:
            gaps["%s/%s" % (label(labels, "iid"), label(labels, "outcome"))] = int(v)
    # Blocks the KV-event index could not take (an unknown parent, mostly:
    # events published before a subscription (re)connected).
    skipped = {label(k, "iid"): int(v) for k, v in
               metric_values(text, "narwhal_kv_events_total").items()
               if label(k, "kind") == "skipped" and v > 0}
    log = "".join(open(os.path.join(work, f)).read() for f in sorted(os.listdir(work))
                  if f.startswith("serve-%s" % tag) and f.endswith(".err"))
    p0_ejected = len(re.findall(r"engine_ejected p0\b", log))
    p0_readmitted = len(re.findall(r"engine_readmitted p0\b", log))
    every = list(stats.values()) + fleet.dead_stats
    per_engine = {iid: s["computed_tokens"] for iid, s in stats.items()}
    if fleet.dead_stats:
        per_engine["p0(killed)"] = sum(s["computed_tokens"] for s in fleet.dead_stats)
    local = decisions.get("prefill/local_prefill", 0)
    prefill_tokens = sum(s["computed_tokens"] for s in every)
    after_restart = None
    if fleet.at_restart is not None:
        after_restart = prefill_tokens - sum(s["computed_tokens"]
                                             for s in fleet.at_restart.values())
    return {
        "prefill": prefill,
        "disaggregate": disaggregate,
        "requests": total_requests,
        "requests_ok": len(ttfts),
        "requests_failed": failed,
        "reply_mismatches": mismatched,
        "requests_per_s": len(ttfts) / wall,
        "wall_s": wall,
        "ttft_p50_ms": 1000 * percentile(ttfts, 50),
        "ttft_p99_ms": 1000 * percentile(ttfts, 99),
        "ttft_mean_ms": 1000 * statistics.mean(ttfts) if ttfts else float("nan"),
        "prefill_tokens": prefill_tokens,
        "prefill_tokens_after_restart": after_restart,
        "prompt_tokens_looked_up": sum(s["prompt_tokens"] for s in every),
        "cached_tokens": sum(s["cached_tokens"] for s in every),
        "prefill_tokens_per_engine": per_engine,
        "local_prefill": local,
        "local_prefill_share": local / max(1, total_requests),
        "placement_decisions": decisions,
        "tokenize_failures": tokenize_failures,
        "kv_event_gaps": gaps,
        "kv_events_skipped": skipped,
        "p0_ejected": p0_ejected,
        "p0_readmitted": p0_readmitted,
        "restart_s": fleet.restart_s,
        "restart_error": restart_error[0] if restart_error else None,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--conversations", type=int, default=40)
    ap.add_argument("--turns", type=int, default=6,
                    help="turns of the longest conversations (each has TURNS-1 or TURNS)")
    ap.add_argument("--concurrency", type=int, default=10)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--systems", type=int, default=8)
    ap.add_argument("--system-tokens", type=int, default=400)
    ap.add_argument("--user-tokens-min", type=int, default=40)
    ap.add_argument("--user-tokens-max", type=int, default=80)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--cache-blocks", type=int, default=0,
                    help="prefix cache per engine in 16-token blocks (default: a third "
                         "of the working set)")
    ap.add_argument("--prefill-ms-per-1k", type=float, default=200)
    ap.add_argument("--token-interval-ms", type=float, default=5)
    ap.add_argument("--kv-transfer-ms", type=float, default=5)
    ap.add_argument("--min-uncached-tokens", type=int, default=256)
    ap.add_argument("--restart-at", type=float, default=0.4,
                    help="share of the requests done when p0 is killed and restarted "
                         "(0: no restart)")
    ap.add_argument("--settle-s", type=float, default=1.0)
    ap.add_argument("--index-chunks", type=int, default=-1,
                    help="placement.index_chunks; -1: a quarter of --cache-blocks, as the "
                         "README advises (a 256-byte chunk is about four 16-token blocks); "
                         "0: the router's default")
    ap.add_argument("--max-attempts", type=int, default=0,
                    help="serving.max_attempts (default: the router's, 1)")
    ap.add_argument("--routers", type=int, default=1,
                    help="router replicas over the one fleet; a conversation's turns "
                         "alternate between them")
    ap.add_argument("--imbalance-abs", type=int, default=8,
                    help="placement.imbalance_abs (the router's default: 8)")
    ap.add_argument("--only", default="", help="comma-separated prefill/disaggregate pairs")
    ap.add_argument("--journal-dir", default="", help="write each router's journal here")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    binary = os.path.join(args.build, "bin")
    work = tempfile.mkdtemp(prefix="kv_placement_bench_")

    systems, convs = workload(args)
    total_requests = sum(len(c["users"]) for c in convs)
    ws = working_set_blocks(systems, convs)
    if args.cache_blocks <= 0:
        args.cache_blocks = max(16, ws // 3)
    final_tokens = [len(c["final_text"]) // CHARS_PER_TOKEN for c in convs]
    workload_info = {
        "systems": args.systems,
        "system_tokens": args.system_tokens,
        "conversations": len(convs),
        "requests": total_requests,
        "concurrency": args.concurrency,
        "seed": args.seed,
        "max_tokens": args.max_tokens,
        "final_conversation_tokens_mean": statistics.mean(final_tokens),
        "final_conversation_tokens_max": max(final_tokens),
        "working_set_blocks": ws,
        "cache_blocks_per_engine": args.cache_blocks,
        "working_set_over_capacity": ws / args.cache_blocks,
        "restart_after_requests": (max(1, int(round(args.restart_at * total_requests)))
                                   if 0 < args.restart_at < 1 else None),
    }
    print("workload: %d conversations (%d requests) over %d system prompts of %d tokens, "
          "concurrency %d, seed %d, %d router(s); final conversation length mean %.0f / max %d "
          "tokens" % (
              len(convs), total_requests, args.systems, args.system_tokens, args.concurrency,
              args.seed, args.routers, workload_info["final_conversation_tokens_mean"],
              workload_info["final_conversation_tokens_max"]))
    print("working set %d blocks of 16 tokens; prefix cache %d blocks per engine (%.1fx); %s" % (
        ws, args.cache_blocks, ws / args.cache_blocks,
        "p0 killed and restarted after %d requests" % max(1, int(round(
            args.restart_at * total_requests))) if 0 < args.restart_at < 1 else "no restart"))
    sys.stdout.flush()

    configs = CONFIGS
    if args.only:
        wanted = set(args.only.split(","))
        configs = [c for c in CONFIGS if "%s/%s" % c in wanted]
    results = []
    for prefill, disaggregate in configs:
        t0 = time.perf_counter()
        r = run_config(binary, work, args, prefill, disaggregate, systems, convs, total_requests)
        results.append(r)
        print("  %s/%s: %d ok, %d failed, %.1f s" % (prefill, disaggregate, r["requests_ok"],
                                                    r["requests_failed"],
                                                    time.perf_counter() - t0),
              file=sys.stderr)

    print()
    print("| prefill | disaggregate | prefill tokens | of which after restart | TTFT p50 ms "
          "| TTFT p99 ms | req/s | failed | local_prefill | restart s |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        print("| %s | %s | %d | %s | %.1f | %.1f | %.1f | %d | %.0f%% | %s |" % (
            r["prefill"], r["disaggregate"], r["prefill_tokens"],
            "-" if r["prefill_tokens_after_restart"] is None
            else "%d" % r["prefill_tokens_after_restart"], r["ttft_p50_ms"],
            r["ttft_p99_ms"], r["requests_per_s"], r["requests_failed"],
            100.0 * r["local_prefill_share"],
            "%.2f" % r["restart_s"] if r["restart_s"] is not None else "-"))
    print()
    for r in results:
        print("%s/%s: decisions %s; tokenize failures %s; kv gaps %s; kv blocks skipped %s; "
              "p0 ejected %d readmitted %d; prefill tokens per engine %s%s%s" % (
                  r["prefill"], r["disaggregate"],
                  ",".join("%s=%d" % kv for kv in sorted(r["placement_decisions"].items())),
                  ",".join("%s=%d" % kv for kv in sorted(r["tokenize_failures"].items())) or "0",
                  ",".join("%s=%d" % kv for kv in sorted(r["kv_event_gaps"].items())) or "none",
                  ",".join("%s=%d" % kv for kv in sorted(r["kv_events_skipped"].items())) or "0",
                  r["p0_ejected"], r["p0_readmitted"],
                  ",".join("%s=%d" % kv for kv in sorted(r["prefill_tokens_per_engine"].items())),
                  "; reply mismatches %d" % r["reply_mismatches"] if r["reply_mismatches"] else "",
                  "; restart error: %s" % r["restart_error"] if r["restart_error"] else ""))

    def find(p, d):
        return next((r for r in results if r["prefill"] == p and r["disaggregate"] == d), None)

    ratios = {}
    kv_always, ca_always, kv_auto = (find("kv_events", "always"), find("cache_aware", "always"),
                                     find("kv_events", "auto"))
    print()
    if kv_always and ca_always:
        ratios["kv_events_over_cache_aware_prefill_tokens_always"] = (
            kv_always["prefill_tokens"] / max(1, ca_always["prefill_tokens"]))
        print("prefill tokens, kv_events / cache_aware (always): %d / %d = %.2f" % (
            kv_always["prefill_tokens"], ca_always["prefill_tokens"],
            ratios["kv_events_over_cache_aware_prefill_tokens_always"]))
    if kv_always and kv_auto:
        ratios["kv_events_ttft_p50_auto_over_always"] = (
            kv_auto["ttft_p50_ms"] / kv_always["ttft_p50_ms"])
        print("kv_events TTFT p50, auto / always: %.1f / %.1f ms = %.2f" % (
            kv_auto["ttft_p50_ms"], kv_always["ttft_p50_ms"],
            ratios["kv_events_ttft_p50_auto_over_always"]))
    if args.json:
        def clean(v):  # NaN (no successful request) is not JSON
            if isinstance(v, float) and v != v:
                return None
            if isinstance(v, dict):
                return {k: clean(x) for k, x in v.items()}
            if isinstance(v, list):
                return [clean(x) for x in v]
            return v
        print(json.dumps(clean({"workload": workload_info, "results": results,
                                "ratios": ratios}), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
