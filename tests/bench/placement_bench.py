#!/usr/bin/env python3
"""Prefill placement benchmark: least_loaded against cache_aware, same run.

Starts 2 producer and 2 consumer narwhal-sim engines (prefix cache on,
prefill latency per uncached token) and, per policy, one narwhal-serve over
them; drives each workload through the router's HTTP door with concurrent
streaming clients, and reports client TTFT (time to the first token event),
producer prefill work (uncached prompt tokens, from GET /sim/prefix_cache),
the per-producer spread of prefills and the router's placement decisions.

Workloads (the same request sequence for both policies):
  shared     SYSTEMS system prompts x many questions (the prompts' blocks do
             not all fit one producer's cache, half of them do)
  unique     every prompt different (nothing to share)

  tests/bench/placement_bench.py [--build build] [--requests 480] [--json]
"""
import argparse
import http.client
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time

MODEL = "Qwen/Qwen3-0.6B"


def start(cmd, out, err, ready, timeout=20.0):
    proc = subprocess.Popen(cmd, stdout=open(out, "w"), stderr=open(err, "w"),
                            stdin=subprocess.DEVNULL)
    deadline = time.time() + timeout
    while time.time() < deadline:
        text = open(out).read()
        m = re.search(ready, text)
        if m:
            return proc, m
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError("%s did not start: %s" % (cmd[0], open(err).read()[-2000:]))


def http_json(host, port, method, path, body=None):
    conn = http.client.HTTPConnection(host, port, timeout=30)
    conn.request(method, path, body=json.dumps(body) if body is not None else None,
                 headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp.status, data


def words(rng, n):
    vocab = ("narwhal tusk arctic whale ocean ice pod dive krill fjord migration sonar "
             "current depth cold water light season tide shelf").split()
    return " ".join(rng.choice(vocab) for _ in range(n))


def workload(kind, n, systems, system_words, seed):
    rng = random.Random(seed)
    prefixes = [("System prompt %d. You are assistant number %d. " % (i, i)) +
                words(rng, system_words) for i in range(systems)]
    prompts = []
    for k in range(n):
        question = " Question %d: %s?" % (k, words(rng, 12))
        if kind == "shared":
            prompts.append(rng.choice(prefixes) + question)
        else:
            prompts.append(("Unique prompt %d. " % k) + words(rng, system_words) + question)
    return prompts


def stream_one(host, port, prompt, max_tokens):
    """Returns (ttft_s, ok)."""
    body = {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "stream": True}
    start_t = time.perf_counter()
    conn = http.client.HTTPConnection(host, port, timeout=60)
    try:
        conn.request("POST", "/v1/completions", body=json.dumps(body),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            resp.read()
            return None, False
        ttft = None
        done = False
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
            if ttft is None:
                chunk = json.loads(payload)
                choices = chunk.get("choices") or []
                if choices and choices[0].get("text"):
                    ttft = time.perf_counter() - start_t
        return ttft, done and ttft is not None
    except (OSError, http.client.HTTPException):
        return None, False
    finally:
        conn.close()


def drive(host, port, prompts, concurrency, max_tokens):
    ttfts = []
    failed = [0]
    lock = threading.Lock()
    cursor = [0]

    def worker():
        while True:
            with lock:
                i = cursor[0]
                cursor[0] += 1
            if i >= len(prompts):
                return
            ttft, ok = stream_one(host, port, prompts[i], max_tokens)
            with lock:
                if ok:
                    ttfts.append(ttft)
                else:
                    failed[0] += 1

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return ttfts, failed[0], time.perf_counter() - t0


def percentile(values, p):
    if not values:
        return float("nan")
    s = sorted(values)
    k = min(len(s) - 1, max(0, int(round(p / 100.0 * (len(s) - 1)))))
    return s[k]


def metric_values(text, name):
    out = {}
    for line in text.splitlines():
        if line.startswith(name + "{"):
            labels, value = line[len(name):].rsplit(" ", 1)
            out[labels] = out.get(labels, 0.0) + float(value)  # several routers: summed
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--requests", type=int, default=480)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--systems", type=int, default=8)
    ap.add_argument("--system-words", type=int, default=1000)  # ~1,500 tokens
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--prefill-ms-per-1k", type=float, default=20)
    ap.add_argument("--cache-blocks", type=int, default=512)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    binary = os.path.join(args.build, "bin")
    work = tempfile.mkdtemp(prefix="placement_bench_")
    procs = []
    try:
        ports = {}
        for iid, role in (("p0", "prefill"), ("p1", "prefill"), ("d0", "decode"), ("d1", "decode")):
            cmd = [os.path.join(binary, "narwhal-sim"), "--port", "0", "--engine-id", iid,
                   "--role", role, "--token-interval-ms", "2", "--threads", "256",
                   "--prefill-ms-per-1k-tokens", str(args.prefill_ms_per_1k)]
            if role == "prefill":
                # One prefill computed at a time: prefill work queues.
                cmd += ["--prefix-cache-blocks", str(args.cache_blocks), "--prefill-lanes", "1"]
            proc, m = start(cmd, os.path.join(work, iid + ".out"), os.path.join(work, iid + ".err"),
                            r"ready port=(\d+)")
            procs.append(proc)
            ports[iid] = int(m.group(1))
        results = []
        for kind in ("shared", "unique"):
            prompts = workload(kind, args.requests, args.systems, args.system_words, args.seed)
            for policy in ("least_loaded", "cache_aware"):
                for iid in ("p0", "p1"):
                    http_json("127.0.0.1", ports[iid], "DELETE", "/sim/prefix_cache")
                fleet = {
                    "model": MODEL,
                    "engines": [{"iid": iid, "url": "http://127.0.0.1:%d" % ports[iid],
                                 "role": "prefill" if iid[0] == "p" else "decode"}
                                for iid in ("p0", "p1", "d0", "d1")],
                    "engine": {"first_token_timeout_s": 30, "decode_read_timeout_s": 30},
                    # A router chunk is 4 of the sim's blocks (256 vs 64 bytes).
                    "placement": {"prefill": policy,
                                  "index_chunks": max(1, args.cache_blocks // 4)},
                }
                cfg = os.path.join(work, "fleet-%s-%s.json" % (kind, policy))
                json.dump(fleet, open(cfg, "w"))
                serve, m = start([os.path.join(binary, "narwhal-serve"), "--config", cfg,
                                  "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0",
                                  "--admin", "127.0.0.1:0"],
                                 os.path.join(work, "serve.out"), os.path.join(work, "serve.err"),
                                 r"ready http=127\.0\.0\.1:(\d+)")
                port = int(m.group(1))
                try:
                    ttfts, failed, wall = drive("127.0.0.1", port, prompts, args.concurrency,
                                                args.max_tokens)
                    _, metrics = http_json("127.0.0.1", port, "GET", "/metrics")
                finally:
                    serve.terminate()
                    serve.wait(timeout=30)
                stats = {iid: json.loads(http_json("127.0.0.1", ports[iid], "GET",
                                                   "/sim/prefix_cache")[1])
                         for iid in ("p0", "p1")}
                prefills = [stats[i]["lookups"] for i in ("p0", "p1")]
                decisions = metric_values(metrics.decode(), "narwhal_placement_decisions_total")
                results.append({
                    "workload": kind,
                    "policy": policy,
                    "requests_ok": len(ttfts),
                    "requests_failed": failed,
                    "requests_per_s": len(ttfts) / wall,
                    "ttft_p50_ms": 1000 * percentile(ttfts, 50),
                    "ttft_p99_ms": 1000 * percentile(ttfts, 99),
                    "prefill_work_tokens": sum(stats[i]["computed_tokens"] for i in ("p0", "p1")),
                    "prompt_tokens": sum(stats[i]["prompt_tokens"] for i in ("p0", "p1")),
                    "cache_hit_rate": (sum(stats[i]["cached_tokens"] for i in ("p0", "p1")) /
                                       max(1, sum(stats[i]["prompt_tokens"] for i in ("p0", "p1")))),
                    "prefills_per_producer": prefills,
                    "load_spread": max(prefills) / max(1, min(prefills)),
                    "prefill_decisions": {k.split('reason="')[1].rstrip('"}'): int(v)
                                          for k, v in decisions.items()
                                          if 'phase="prefill"' in k and v > 0},
                })
        if args.json:
            print(json.dumps(results, indent=1))
        else:
            print("%-7s %-13s %6s %4s %7s %9s %9s %12s %8s %11s %6s  %s" % (
                "load", "policy", "ok", "fail", "req/s", "ttft_p50", "ttft_p99",
                "prefill_work", "hit_rate", "p0/p1", "spread", "decisions"))
            for r in results:
                print("%-7s %-13s %6d %4d %7.1f %7.1fms %7.1fms %12d %8.2f %11s %6.2f  %s" % (
                    r["workload"], r["policy"], r["requests_ok"], r["requests_failed"],
                    r["requests_per_s"], r["ttft_p50_ms"], r["ttft_p99_ms"],
                    r["prefill_work_tokens"], r["cache_hit_rate"],
                    "%d/%d" % tuple(r["prefills_per_producer"]), r["load_spread"],
                    ",".join("%s=%d" % kv for kv in sorted(r["prefill_decisions"].items()))))
            for kind in ("shared", "unique"):
                ll = next(r for r in results if r["workload"] == kind and r["policy"] == "least_loaded")
                ca = next(r for r in results if r["workload"] == kind and r["policy"] == "cache_aware")
                print("%s: cache_aware prefill work %.0f%% lower, ttft p50 %.1f -> %.1f ms, "
                      "p99 %.1f -> %.1f ms, req/s %.1f -> %.1f" % (
                          kind, 100.0 * (1 - ca["prefill_work_tokens"] /
                                         max(1, ll["prefill_work_tokens"])),
                          ll["ttft_p50_ms"], ca["ttft_p50_ms"], ll["ttft_p99_ms"],
                          ca["ttft_p99_ms"], ll["requests_per_s"], ca["requests_per_s"]))
        return 1 if any(r["requests_failed"] for r in results) else 0
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()


if __name__ == "__main__":
    sys.exit(main())
