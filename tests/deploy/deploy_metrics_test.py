"""Every metric the Grafana dashboard and the alert rules use exists in a live
narwhal-serve's /metrics.

narwhal-serve runs on its embedded simulated fleet; the test first makes the
router pass through the events that create labelled series (requests, a
failed attempt with a rejected handoff, an operator ejection and a
readmission), so a name missing from /metrics is a name the router does not
export. The tenant series come from a second router configured with one
tenant (serving.api_keys) on a narwhal-sim engine.
"""

import json
import os
import re
import subprocess
import tempfile
import unittest
import urllib.request

from serve_process import ServeProcess, metric_names

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DASHBOARD = os.path.join(ROOT, "deploy/grafana/narwhal.json")
RULES = os.path.join(ROOT, "deploy/prometheus/narwhal-rules.yml")
# Series Prometheus makes itself for every target.
PROMETHEUS_SERIES = {"up", "scrape_duration_seconds", "scrape_samples_scraped"}
# Families with a series only while something is so: a link's series exists
# while the link is held (a fleet of N engines has N^2 links).
CONDITIONAL_SERIES = {"narwhal_link_held"}
METRIC = re.compile(r"\b(narwhal_[a-z0-9_]+|up)\b")


def names_in(text):
    return set(METRIC.findall(text))


def dashboard_names():
    with open(DASHBOARD) as f:
        dash = json.load(f)
    exprs = []

    def walk(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("expr", "query", "definition") and isinstance(value, str):
                    exprs.append(value)
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(dash)
    return names_in("\n".join(exprs))


def rule_names():
    import yaml
    with open(RULES) as f:
        doc = yaml.safe_load(f)
    exprs = [rule["expr"] for group in doc["groups"] for rule in group["rules"]]
    return names_in("\n".join(exprs))


def admin_call(serve, method, body):
    buf = os.environ["NARWHAL_BUF_BIN"]
    out = subprocess.run(
        [buf, "curl", "--protocol", "grpc", "--http2-prior-knowledge",
         f"http://{serve.admin}/narwhal.admin.v1.Admin/{method}", "-d", json.dumps(body)],
        capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise AssertionError(f"buf curl {method} failed: {out.stderr}")
    return json.loads(out.stdout)


def tenant_exposition():
    """/metrics of a narwhal-serve with one tenant (serving.api_keys) that
    sent one request, on one narwhal-sim engine: the tenant series exist only
    with tenants."""
    sim = subprocess.Popen([os.environ["NARWHAL_SIM_BIN"], "--port", "0", "--engine-id", "e0"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        port = int(re.search(r"port=(\d+)", sim.stdout.readline()).group(1))
        fleet = {"model": "Qwen/Qwen3-0.6B",
                 "engines": [{"iid": "e0", "url": f"http://127.0.0.1:{port}"}],
                 "serving": {"api_keys": [{"name": "search", "key_env": "NARWHAL_TEST_TENANT_KEY",
                                           "max_inflight": 4, "requests_per_s": 100}]}}
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "fleet.json")
            with open(path, "w") as f:
                json.dump(fleet, f)
            os.environ["NARWHAL_TEST_TENANT_KEY"] = "tenant-key-1"
            with ServeProcess(extra_args=["--config", path]) as serve:
                req = urllib.request.Request(
                    f"http://{serve.http}/v1/completions",
                    data=json.dumps({"model": "Qwen/Qwen3-0.6B", "prompt": "hi",
                                     "max_tokens": 2}).encode(),
                    headers={"Content-Type": "application/json",
                             "Authorization": "Bearer tenant-key-1"})
                with urllib.request.urlopen(req, timeout=30) as resp:
                    assert resp.status == 200, resp.status
                return serve.get("/metrics")
    finally:
        sim.kill()
        sim.wait()
        sim.stdout.close()


class DeployMetricsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with ServeProcess() as serve:
            for _ in range(3):
                status, _ = serve.complete()
                assert status == 200, status
            assert serve.chat()[0] == 200
            assert serve.complete(stream=True)[0] == 200
            # A producer that returns a descriptor without an engine id: the
            # decode leg is refused (invalid continuation, a failed attempt).
            sims = serve.sim_engines()
            assert {"p0", "p1", "d0", "d1"} <= sims.keys(), sims
            for iid in ("p0", "p1"):
                status, text = serve.post_json(
                    f"http://{sims[iid]}/sim/faults",
                    {"faults": [{"kind": "descriptor_without_engine_id", "times": 1}]})
                assert status == 200, text
            status, _ = serve.complete()
            assert status == 502, status
            admin_call(serve, "EjectEngine", {"iid": "d0", "reason": "deploy metrics test"})
            readmit = admin_call(serve, "ReadmitEngine", {"iid": "d0"})
            assert readmit.get("readmitted") is True, readmit
            cls.exposition = serve.get("/metrics")
        cls.exposition += "\n" + tenant_exposition()
        cls.exported = metric_names(cls.exposition) | PROMETHEUS_SERIES | CONDITIONAL_SERIES

    def test_workload_created_the_labelled_series(self):
        for name in ("narwhal_attempt_failures_total", "narwhal_handoff_rejected_total",
                     "narwhal_engine_ejections_total", "narwhal_engine_readmissions_total"):
            self.assertIn(name, self.exported)

    def test_help_texts_are_plain_words(self):
        # HELP names what is counted, never a behaviour or spec number.
        helps = re.findall(r"^# HELP (\S+) (.*)$", self.exposition, re.M)
        self.assertGreater(len(helps), 30)
        for name, text in helps:
            self.assertNotRegex(text, r"\bB\d+\b|§|SPEC", name)
            self.assertTrue(text.strip(), name)

    def test_dashboard_uses_only_exported_metrics(self):
        used = dashboard_names()
        self.assertGreater(len(used), 15, used)
        self.assertEqual(sorted(used - self.exported), [], "dashboard metrics not in /metrics")

    def test_rules_use_only_exported_metrics(self):
        used = rule_names()
        self.assertGreater(len(used), 6, used)
        self.assertEqual(sorted(used - self.exported), [], "rule metrics not in /metrics")

    def test_selector_labels_exist_on_their_metrics(self):
        # A selector such as narwhal_engine_held{kind="inference"} matches
        # nothing when the metric has no such label.
        labels = {}
        for line in self.exposition.splitlines():
            m = re.match(r"^([a-z_:][a-z0-9_:]*)\{(.*)\} ", line)
            if m:
                name = re.sub(r"_(bucket|sum|count)$", "", m.group(1))
                labels.setdefault(name, set()).update(re.findall(r"(\w+)=\"", m.group(2)))
                labels.setdefault(m.group(1), set()).update(re.findall(r"(\w+)=\"", m.group(2)))
        with open(RULES) as f:
            text = f.read()
        with open(DASHBOARD) as f:
            text += f.read().replace('\\"', '"')
        checked = 0
        for name, selector in re.findall(r"\b(narwhal_[a-z0-9_]+)\{([^}]*)\}", text):
            for label in re.findall(r"(\w+)\s*[=!]~?", selector):
                if label in ("job", "instance", "le"):
                    continue  # added by Prometheus, or the bucket bound
                checked += 1
                self.assertIn(label, labels.get(name, set()), f"{name} has no label {label}")
        self.assertGreaterEqual(checked, 3)

    def test_a_misspelt_name_would_be_caught(self):
        self.assertNotIn("narwhal_request_total", self.exported)
        self.assertEqual(names_in('rate(narwhal_nope_total{job="narwhal"}[5m])'),
                         {"narwhal_nope_total"})


if __name__ == "__main__":
    unittest.main()
