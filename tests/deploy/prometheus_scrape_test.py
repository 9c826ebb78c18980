"""A real Prometheus (Debian's `prometheus`) scrapes a live narwhal-serve.

narwhal-serve runs on its embedded simulated fleet on loopback; Prometheus
runs with deploy/prometheus/prometheus.yml (its alert rules included), a 1 s
scrape interval, a temporary storage directory and free loopback ports. While
requests flow, the query API must return narwhal_requests_total with the
requests sent and a histogram_quantile of narwhal_first_byte_seconds.
"""

import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request

import yaml

from serve_process import ServeProcess, free_port

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROM_DIR = os.path.join(ROOT, "deploy/prometheus")
DEADLINE_S = 30


def dashboard_queries():
    """The dashboard's PromQL with Grafana's variables filled in."""
    with open(os.path.join(ROOT, "deploy/grafana/narwhal.json")) as f:
        dash = json.load(f)
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    exprs += [v["definition"] for v in dash["templating"]["list"] if "definition" in v]
    out = []
    for expr in exprs:
        expr = expr.replace("$__rate_interval", "5s").replace("$job", ".*").replace("$instance", ".*")
        if expr.startswith("label_values("):
            # Grafana's helper: label_values(selector, label) -> the selector.
            expr = expr[len("label_values("):].rsplit(",", 1)[0]
        out.append(expr)
    return out


class PrometheusScrapeTest(unittest.TestCase):
    def setUp(self):
        self.prometheus = shutil.which("prometheus")
        self.assertIsNotNone(self.prometheus, "Debian's prometheus package is not installed")
        self.tmp = tempfile.mkdtemp(prefix="narwhal-prom-")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def write_config(self, target):
        with open(os.path.join(PROM_DIR, "prometheus.yml")) as f:
            config = yaml.safe_load(f)
        config["global"]["scrape_interval"] = "1s"
        config["global"]["evaluation_interval"] = "1s"
        config["rule_files"] = [os.path.join(PROM_DIR, r) for r in config["rule_files"]]
        (job,) = [j for j in config["scrape_configs"] if j["job_name"] == "narwhal"]
        job["scrape_interval"] = "1s"
        job["scrape_timeout"] = "1s"
        job["static_configs"] = [{"targets": [target]}]
        path = os.path.join(self.tmp, "prometheus.yml")
        with open(path, "w") as f:
            yaml.safe_dump(config, f)
        return path

    def query(self, port, expr):
        url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                doc = json.load(resp)
        except urllib.error.HTTPError as err:
            self.fail(f"Prometheus refused {expr!r}: {err.read().decode()}")
        self.assertEqual(doc["status"], "success", doc)
        return doc["data"]["result"]

    def wait_for(self, what, probe):
        deadline = time.monotonic() + DEADLINE_S
        while True:
            try:
                value = probe()
            except OSError:
                value = None
            if value:
                return value
            if time.monotonic() > deadline:
                self.fail(f"Prometheus never returned {what} within {DEADLINE_S} s")
            time.sleep(0.25)

    def test_prometheus_scrapes_requests_and_first_byte_quantile(self):
        with ServeProcess() as serve:
            config = self.write_config(serve.http)
            port = free_port()
            log = open(os.path.join(self.tmp, "prometheus.log"), "w")
            prom = subprocess.Popen(
                [self.prometheus, f"--config.file={config}",
                 f"--storage.tsdb.path={os.path.join(self.tmp, 'data')}",
                 f"--web.listen-address=127.0.0.1:{port}",
                 "--storage.tsdb.retention.time=1h"],
                stdout=log, stderr=subprocess.STDOUT)
            stop = threading.Event()
            sent = [0]

            def traffic():
                while not stop.is_set():
                    status, _ = serve.complete(max_tokens=2)
                    if status == 200:
                        sent[0] += 1
                    time.sleep(0.05)

            driver = threading.Thread(target=traffic)
            try:
                def ready():
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=2) as r:
                        return r.status == 200
                self.wait_for("/-/ready", ready)
                driver.start()

                up = self.wait_for("up == 1", lambda: self.query(port, 'up{job="narwhal"} == 1'))
                self.assertEqual(up[0]["metric"]["instance"], serve.http)

                def requests():
                    result = self.query(
                        port, 'sum(narwhal_requests_total{job="narwhal", terminal="completed"})')
                    return result if result and float(result[0]["value"][1]) >= 5 else None
                result = self.wait_for("narwhal_requests_total", requests)
                self.assertLessEqual(float(result[0]["value"][1]), sent[0] + 1)

                def quantile():
                    result = self.query(
                        port, 'histogram_quantile(0.99, sum by (le) '
                              '(rate(narwhal_first_byte_seconds_bucket{job="narwhal"}[5s])))')
                    if not result or result[0]["value"][1] in ("NaN", "+Inf"):
                        return None
                    return result
                result = self.wait_for("a first-byte p99", quantile)
                p99 = float(result[0]["value"][1])
                # Loopback simulated engines answer in milliseconds; the p99
                # must sit inside the histogram's finite buckets.
                self.assertGreater(p99, 0)
                self.assertLess(p99, 10)

                # Every dashboard query is PromQL this Prometheus evaluates.
                for expr in dashboard_queries():
                    self.query(port, expr)

                # The alert rules loaded and evaluate without errors.
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/rules", timeout=5) as r:
                    groups = json.load(r)["data"]["groups"]
                rules = [rule for g in groups for rule in g["rules"]]
                self.assertGreaterEqual(len(rules), 9)
                self.wait_for("rules evaluated", lambda: self._rules_healthy(port))
            finally:
                stop.set()
                if driver.is_alive():
                    driver.join()
                prom.terminate()
                try:
                    prom.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    prom.kill()
                    prom.wait()
                log.close()

    def _rules_healthy(self, port):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/rules", timeout=5) as r:
            groups = json.load(r)["data"]["groups"]
        rules = [rule for g in groups for rule in g["rules"]]
        for rule in rules:
            self.assertNotEqual(rule.get("health"), "err", rule)
        return all(rule.get("health") == "ok" for rule in rules)


if __name__ == "__main__":
    unittest.main()
