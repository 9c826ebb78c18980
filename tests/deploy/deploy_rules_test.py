"""deploy/prometheus: promtool accepts the scrape config and the alert rules,
and the rules' unit tests pass (`promtool test rules`)."""

import os
import shutil
import subprocess
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROM_DIR = os.path.join(ROOT, "deploy/prometheus")


def promtool(*args, cwd=PROM_DIR):
    return subprocess.run(["promtool", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=60)


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
