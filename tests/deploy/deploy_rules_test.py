"""deploy/prometheus: promtool accepts the scrape config and the alert rules,
the rules' unit tests pass (`promtool test rules`), and those tests keep every
alert quiet on series exported at zero from the start, as narwhal exports
them."""

import os
import re
import shutil
import subprocess
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROM_DIR = os.path.join(ROOT, "deploy/prometheus")


def promtool(*args, cwd=PROM_DIR):
    return subprocess.run(["promtool", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=60)


def expand_values(text):
    """promtool's input-series notation as a list (None: a missing sample)."""
    out = []
    for token in text.split():
        m = re.fullmatch(r"(_|stale|-?[\d.]+|[-+]?Inf|NaN)(?:([-+])([\d.]+))?(?:x(\d+))?",
                         token)
        start, sign, step, times = m.groups()
        if start in ("_", "stale"):
            out += [None] * int(times or 1)
            continue
        n = int(times) + 1 if times is not None else 1
        delta = float(step) * (-1 if sign == "-" else 1) if step else 0.0
        out += [float(start) + i * delta for i in range(n)]
    return out


def load(name):
    import yaml
    with open(os.path.join(PROM_DIR, name)) as f:
        return yaml.safe_load(f)


class DeployRulesTest(unittest.TestCase):
    def setUp(self):
        self.assertIsNotNone(shutil.which("promtool"), "promtool (Debian's prometheus) missing")

    def test_check_rules(self):
        out = promtool("check", "rules", "narwhal-rules.yml")
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        self.assertIn("SUCCESS", out.stdout)

    def test_rule_unit_tests_pass(self):
        out = promtool("test", "rules", "narwhal-rules.test.yml")
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        self.assertIn("SUCCESS", out.stdout)

    def test_check_config(self):
        out = promtool("check", "config", "prometheus.yml")
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)

    def test_every_required_alert_exists_and_is_unit_tested(self):
        import yaml
        with open(os.path.join(PROM_DIR, "narwhal-rules.yml")) as f:
            rules = yaml.safe_load(f)
        alerts = {r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r}
        required = {"NarwhalRouterDown", "NarwhalEngineHeld", "NarwhalEngineEjected",
                    "NarwhalNoEngineForRole", "NarwhalErrorRateBurst", "NarwhalRetriesDenied",
                    "NarwhalFirstByteP99OverBudget"}
        self.assertLessEqual(required, alerts)
        with open(os.path.join(PROM_DIR, "narwhal-rules.test.yml")) as f:
            tests = yaml.safe_load(f)
        firing = {case["alertname"] for t in tests["tests"] for case in t["alert_rule_test"]
                  if case.get("exp_alerts")}
        quiet = {case["alertname"] for t in tests["tests"] for case in t["alert_rule_test"]
                 if not case.get("exp_alerts")}
        self.assertEqual(sorted(alerts - firing), [], "alerts without a firing test")
        self.assertEqual(sorted(alerts - quiet), [], "alerts without a quiet test")

    def test_flat_zero_group_covers_every_alert_and_metric(self):
        # Every alert has a no-alert case on series that exist from the start
        # with every counter at 0, over a rollout (a replica whose series
        # appear later), and the group feeds every metric a rule reads.
        rules = load("narwhal-rules.yml")
        alerts = {r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r}
        metrics = {m for g in rules["groups"] for r in g["rules"]
                   for m in re.findall(r"\b(narwhal_\w+|up)\{", r["expr"])}
        (flat,) = [t for t in load("narwhal-rules.test.yml")["tests"]
                   if t.get("name") == "flat zero"]
        quiet = {c["alertname"] for c in flat["alert_rule_test"] if not c.get("exp_alerts")}
        self.assertEqual(sorted(alerts - quiet), [], "alerts without a flat-zero quiet case")
        self.assertFalse([c for c in flat["alert_rule_test"] if c.get("exp_alerts")])
        fed = set()
        late = False
        for s in flat["input_series"]:
            name = s["series"].split("{", 1)[0]
            fed.add(name)
            values = expand_values(s["values"])
            present = [v for v in values if v is not None]
            self.assertTrue(present, s["series"])
            # Present from its first sample to the end, never missing between.
            self.assertEqual(values[len(values) - len(present):], present, s["series"])
            late = late or values[0] is None
            if re.search(r"_(total|bucket|count|sum)$", name):
                self.assertEqual(set(present), {0.0}, f"counter not flat at 0: {s['series']}")
        self.assertTrue(late, "no series appears after the start (a rollout's new replica)")
        self.assertEqual(sorted(metrics - fed), [], "rule metrics the flat-zero group lacks")

    def test_flat_zero_group_catches_a_counter_rule_without_its_guard(self):
        # The rules' "> 0" next to `unless ... offset` is what keeps a new
        # replica's zero series quiet: without it the flat-zero group fails.
        with open(os.path.join(PROM_DIR, "narwhal-rules.yml")) as f:
            text = f.read()
        for metric in ("narwhal_engine_ejections_total", "narwhal_retry_denied_total"):
            guarded = f'({metric}{{job="narwhal"}} > 0\n'
            self.assertIn(guarded, text)
            with tempfile.TemporaryDirectory() as tmp:
                with open(os.path.join(tmp, "narwhal-rules.yml"), "w") as f:
                    f.write(text.replace(guarded, f'({metric}{{job="narwhal"}}\n'))
                shutil.copy(os.path.join(PROM_DIR, "narwhal-rules.test.yml"), tmp)
                out = promtool("test", "rules", "narwhal-rules.test.yml", cwd=tmp)
            self.assertNotEqual(out.returncode, 0, metric)
            self.assertIn("name: flat zero", out.stdout + out.stderr, metric)

    def test_expand_values(self):
        self.assertEqual(expand_values("_x2 0x2 1+2x1 stale"),
                         [None, None, 0.0, 0.0, 0.0, 1.0, 3.0, None])

    def test_a_broken_rule_test_fails(self):
        # The unit tests are real: an expectation that does not hold fails.
        with tempfile.TemporaryDirectory() as tmp:
            shutil.copy(os.path.join(PROM_DIR, "narwhal-rules.yml"), tmp)
            with open(os.path.join(PROM_DIR, "narwhal-rules.test.yml")) as f:
                text = f.read()
            broken = text.replace("severity: critical, job: narwhal, instance: \"r0:8000\"}",
                                  "severity: critical, job: narwhal, instance: \"r9:8000\"}", 1)
            self.assertNotEqual(broken, text)
            with open(os.path.join(tmp, "narwhal-rules.test.yml"), "w") as f:
                f.write(broken)
            out = promtool("test", "rules", "narwhal-rules.test.yml", cwd=tmp)
            self.assertNotEqual(out.returncode, 0, out.stdout)


if __name__ == "__main__":
    unittest.main()
