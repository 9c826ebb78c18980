"""The deploy kit's files: Kubernetes manifests parse and agree with each
other and with the fleet file, the Dockerfile installs deploy/apt-packages.txt
and ships exactly the runtime libraries of the binaries, its HEALTHCHECK works
against a live narwhal-serve, the systemd unit verifies, and the vLLM fleet
file passes narwhal-check's config validation and matches its commands."""

import glob
import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import unittest

import yaml

from serve_process import ServeProcess, free_port

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEPLOY = os.path.join(ROOT, "deploy")
BINARIES = ("narwhal-serve", "narwhal-check", "narwhal-sim", "narwhal-bench")


def read(path):
    with open(os.path.join(ROOT, path)) as f:
        return f.read()


def load_yaml_docs(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def fleet():
    return json.loads(read("deploy/vllm/fleet.json"))


def port_of(address):
    return int(address.rsplit(":", 1)[1])


def apt_packages():
    return [line.strip() for line in read("deploy/apt-packages.txt").splitlines()
            if line.strip() and not line.strip().startswith("#")]


def dockerfile_stages():
    """[(from_line, [instruction, ...])], continuation lines joined."""
    text = re.sub(r"\\\n", " ", read("deploy/docker/Dockerfile"))
    stages = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.upper().startswith("FROM "):
            stages.append((line, []))
        elif stages:
            stages[-1][1].append(line)
    return stages


class KubernetesManifestTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.docs = {}
        for path in sorted(glob.glob(os.path.join(DEPLOY, "k8s", "*.yaml"))):
            for doc in load_yaml_docs(path):
                cls.docs.setdefault(doc["kind"], []).append((os.path.basename(path), doc))

    def one(self, kind):
        self.assertIn(kind, self.docs)
        self.assertEqual(len(self.docs[kind]), 1, kind)
        return self.docs[kind][0][1]

    def test_every_manifest_parses_with_kind_and_name(self):
        kinds = set(self.docs)
        self.assertLessEqual({"Deployment", "Service", "ConfigMap", "PodDisruptionBudget",
                              "ServiceMonitor", "PrometheusRule", "Kustomization"}, kinds)
        for kind, entries in self.docs.items():
            for path, doc in entries:
                self.assertIn("apiVersion", doc, path)
                if kind != "Kustomization":
                    self.assertTrue(doc["metadata"]["name"], path)

    def test_kustomization_lists_every_manifest(self):
        kust = self.one("Kustomization")
        files = {os.path.basename(p) for p in glob.glob(os.path.join(DEPLOY, "k8s", "*.yaml"))}
        self.assertEqual(set(kust["resources"]), files - {"kustomization.yaml"})

    def test_configmap_carries_the_vllm_fleet_file(self):
        cm = self.one("ConfigMap")
        self.assertEqual(json.loads(cm["data"]["fleet.json"]), fleet())

    def pod(self):
        return self.one("Deployment")["spec"]["template"]

    def container(self):
        (c,) = self.pod()["spec"]["containers"]
        return c

    def test_deployment_ports_follow_the_fleet_listeners(self):
        # The probes themselves: deploy_k8s_test (TLS on and off, live).
        c = self.container()
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        listen = fleet()["listen"]
        self.assertEqual(ports["http"], port_of(listen["http"]))
        self.assertEqual(ports["grpc"], port_of(listen["grpc"]))
        self.assertEqual(ports["probes"], port_of(listen["health"]))
        for key in ("http", "grpc", "health"):
            self.assertTrue(listen[key].startswith("0.0.0.0:"), "pods must listen beyond loopback")

    def test_grace_period_covers_prestop_and_graceful_timeout(self):
        spec = self.pod()["spec"]
        command = self.container()["lifecycle"]["preStop"]["exec"]["command"]
        self.assertEqual(command[0], "sleep")
        pre_stop = float(command[1])
        graceful = fleet()["serving"]["graceful_timeout_s"]
        grace = spec["terminationGracePeriodSeconds"]
        self.assertGreaterEqual(grace, pre_stop + graceful + 5,
                                "terminationGracePeriodSeconds < preStop + graceful_timeout_s + 5")
        self.assertLessEqual(grace, pre_stop + graceful + 30, "grace period far above the drain")

    def test_container_has_resources_and_runs_unprivileged(self):
        c = self.container()
        self.assertIn("cpu", c["resources"]["requests"])
        self.assertIn("memory", c["resources"]["requests"])
        self.assertIn("memory", c["resources"]["limits"])
        pod_sc = self.pod()["spec"]["securityContext"]
        self.assertTrue(pod_sc["runAsNonRoot"])
        self.assertNotEqual(pod_sc["runAsUser"], 0)
        self.assertFalse(c["securityContext"]["allowPrivilegeEscalation"])

    def test_config_is_mounted_where_the_args_read_it(self):
        c = self.container()
        args = c["args"]
        config_path = args[args.index("--config") + 1]
        (mount,) = [m for m in c["volumeMounts"] if config_path.startswith(m["mountPath"] + "/")]
        (volume,) = [v for v in self.pod()["spec"]["volumes"] if v["name"] == mount["name"]]
        self.assertEqual(volume["configMap"]["name"], self.one("ConfigMap")["metadata"]["name"])
        self.assertIn(os.path.basename(config_path), self.one("ConfigMap")["data"])

    def test_selectors_match_the_pods_and_ports(self):
        labels = self.pod()["metadata"]["labels"]
        deployment = self.one("Deployment")
        self.assertEqual(deployment["spec"]["selector"]["matchLabels"].items() - labels.items(), set())
        svc = self.one("Service")
        self.assertEqual(svc["spec"]["selector"].items() - labels.items(), set())
        names = {p["name"] for p in self.container()["ports"]}
        for port in svc["spec"]["ports"]:
            self.assertIn(port["targetPort"], names)
        pdb = self.one("PodDisruptionBudget")
        self.assertEqual(pdb["spec"]["selector"]["matchLabels"].items() - labels.items(), set())
        self.assertLess(pdb["spec"]["maxUnavailable"], deployment["spec"]["replicas"])
        mon = self.one("ServiceMonitor")
        self.assertEqual(mon["spec"]["selector"]["matchLabels"].items()
                         - svc["metadata"]["labels"].items(), set())
        svc_ports = {p["name"] for p in svc["spec"]["ports"]}
        for endpoint in mon["spec"]["endpoints"]:
            self.assertIn(endpoint["port"], svc_ports)
            self.assertEqual(endpoint["path"], "/metrics")
        # The alert rules select job="narwhal": the operator's job label is
        # the Service name.
        self.assertEqual(svc["metadata"]["name"], "narwhal")
        self.assertIn('job="narwhal"', read("deploy/prometheus/narwhal-rules.yml"))

    def test_prometheus_rule_carries_the_alert_rules(self):
        rule = self.one("PrometheusRule")
        with open(os.path.join(DEPLOY, "prometheus", "narwhal-rules.yml")) as f:
            groups = yaml.safe_load(f)["groups"]
        self.assertEqual(rule["spec"]["groups"], groups)

    def test_readme_explains_per_replica_breaker_state(self):
        text = read("deploy/k8s/README.md")
        self.assertIn("own breaker state", text)
        self.assertIn("Envoy", text)


class DockerfileTest(unittest.TestCase):
    def test_two_stages_on_bookworm(self):
        stages = dockerfile_stages()
        self.assertEqual(len(stages), 2)
        for from_line, _ in stages:
            self.assertRegex(from_line, r"^FROM debian:bookworm(-slim)?\b")

    def test_build_stage_installs_exactly_apt_packages_txt(self):
        (_, build), _ = dockerfile_stages()
        self.assertIn("COPY deploy/apt-packages.txt /tmp/apt-packages.txt", build)
        (install,) = [i for i in build if "apt-get install" in i]
        self.assertIn("/tmp/apt-packages.txt", install)
        self.assertIn("xargs apt-get install", install)
        # No package is named inline next to the list.
        after = install.split("apt-get install", 1)[1].split("&&", 1)[0]
        self.assertEqual([w for w in shlex.split(after) if not w.startswith("-")], [])
        # The list the stage reads parses to packages (what install-deps.sh reads too).
        pkgs = apt_packages()
        self.assertIn("libgrpc++-dev", pkgs)
        self.assertIn("python3-yaml", pkgs)
        self.assertEqual(len(pkgs), len(set(pkgs)), "duplicate packages")

    def runtime_packages(self):
        _, (_, runtime) = dockerfile_stages()
        (install,) = [i for i in runtime if "apt-get install" in i]
        words = install.split("apt-get install", 1)[1].split("&&", 1)[0].split()
        return {w for w in words if not w.startswith("-")}

    def test_runtime_stage_installs_exactly_the_binaries_libraries(self):
        if not shutil.which("dpkg"):
            self.skipTest("dpkg not available")
        bindir = os.path.dirname(os.environ["NARWHAL_SERVE_BIN"])
        libs = set()
        for binary in BINARIES:
            out = subprocess.run(["ldd", os.path.join(bindir, binary)], capture_output=True,
                                 text=True, check=True).stdout
            libs.update(os.path.realpath(lib) for lib in re.findall(r"=> (/\S+)", out))
        # One dpkg query for every library (each query reads the whole
        # database); /lib is /usr/lib on bookworm, and dpkg knows one of them.
        candidates = sorted(libs | {re.sub(r"^/usr/lib/", "/lib/", l) for l in libs})
        out = subprocess.run(["dpkg", "-S", *candidates], capture_output=True, text=True)
        owners = {}
        for line in out.stdout.splitlines():
            package, path = line.split(": ", 1)
            owners[path] = package.split(":")[0]
        needed = set()
        for lib in libs:
            owner = owners.get(lib) or owners.get(re.sub(r"^/usr/lib/", "/lib/", lib))
            self.assertIsNotNone(owner, f"no Debian package owns {lib}")
            needed.add(owner)
        self.assertEqual(sorted(self.runtime_packages()), sorted(needed))

    def test_runtime_stage_copies_only_binaries_and_runs_unprivileged(self):
        _, (_, runtime) = dockerfile_stages()
        copies = [i for i in runtime if i.startswith("COPY")]
        from_build = [c for c in copies if "--from=build" in c]
        self.assertEqual(from_build, ["COPY --from=build /out/ /usr/local/bin/"])
        build_text = " ".join(dockerfile_stages()[0][1])
        for binary in BINARIES:
            self.assertIn(f"--target {' '.join(BINARIES)}", build_text)
            self.assertIn(binary, build_text)
        (user,) = [i for i in runtime if i.startswith("USER ")]
        self.assertNotIn(user.split()[1].split(":")[0], ("0", "root"))
        self.assertTrue(any(i.startswith("HEALTHCHECK ") for i in runtime))
        (entry,) = [i for i in runtime if i.startswith("ENTRYPOINT")]
        self.assertEqual(json.loads(entry.split(None, 1)[1]), ["/usr/local/bin/narwhal-serve"])

    def healthcheck(self, port):
        """Runs the image's HEALTHCHECK command with NARWHAL_HEALTH_PORT=port."""
        _, (_, runtime) = dockerfile_stages()
        (hc,) = [i for i in runtime if i.startswith("HEALTHCHECK ")]
        argv = json.loads(hc.split(" CMD ", 1)[1])
        self.assertNotIn("/dev/tcp/127.0.0.1/8000", argv[-1])
        env = dict(os.environ, NARWHAL_HEALTH_PORT=str(port))
        return subprocess.run(argv, capture_output=True, timeout=10, env=env).returncode

    def test_healthcheck_passes_on_a_live_router_and_fails_without_one(self):
        with ServeProcess() as serve:
            self.assertEqual(self.healthcheck(port_of(serve.http)), 0)
        self.assertNotEqual(self.healthcheck(free_port()), 0)

    def test_healthcheck_port_defaults_to_the_http_listener(self):
        _, (_, runtime) = dockerfile_stages()
        self.assertIn("ENV NARWHAL_HEALTH_PORT=8000", runtime)
        self.assertIn("EXPOSE 8000 50051", runtime)

    def test_default_command_requires_a_fleet_file(self):
        """Without a mounted fleet file the image's command refuses to start
        (it never serves the simulated fleet)."""
        _, (_, runtime) = dockerfile_stages()
        (cmd,) = [i for i in runtime if i.startswith("CMD ")]
        args = json.loads(cmd.split(None, 1)[1])
        self.assertEqual(args[:2], ["--config", "/etc/narwhal/fleet.json"])
        serve = os.environ["NARWHAL_SERVE_BIN"]
        with tempfile.TemporaryDirectory() as d:
            args[1] = os.path.join(d, "fleet.json")  # absent, as in an image without a mount
            args = [a.replace("0.0.0.0:8000", "127.0.0.1:0").replace("0.0.0.0:50051", "127.0.0.1:0")
                    for a in args]
            done = subprocess.run([serve] + args, capture_output=True, text=True, timeout=30)
        self.assertNotEqual(done.returncode, 0)
        self.assertIn(os.path.join(d, "fleet.json"), done.stderr)
        self.assertNotIn("simulated", done.stdout + done.stderr)


class GrafanaDashboardTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dash = json.loads(read("deploy/grafana/narwhal.json"))

    def test_panels_are_well_formed(self):
        panels = self.dash["panels"]
        ids = [p["id"] for p in panels]
        self.assertEqual(len(ids), len(set(ids)), "duplicate panel ids")
        for p in panels:
            for key in ("h", "w", "x", "y"):
                self.assertIn(key, p["gridPos"], p["title"])
            self.assertLessEqual(p["gridPos"]["x"] + p["gridPos"]["w"], 24, p["title"])
            if p["type"] == "timeseries":
                refs = [t["refId"] for t in p["targets"]]
                self.assertTrue(refs, p["title"])
                self.assertEqual(len(refs), len(set(refs)), p["title"])
                for t in p["targets"]:
                    self.assertTrue(t["expr"].strip(), p["title"])
                    self.assertEqual(t["datasource"]["uid"], "${datasource}")
        names = {v["name"] for v in self.dash["templating"]["list"]}
        # tenant: the panels repeated per tenant (serving.api_keys).
        self.assertEqual(names, {"datasource", "job", "instance", "tenant"})

    # What a query measures, from its shape: the panel's unit must suit
    # every query of the panel (no bytes and counts on one axis).
    UNITS = {"seconds": {"s"}, "bytes": {"bytes"}, "rate": {"reqps", "ops"},
             "cpu": {"percentunit"}, "count": {"short"}}

    @staticmethod
    def measures(expr):
        if "histogram_quantile(" in expr and "_seconds_bucket" in expr:
            return "seconds"
        if "time() - process_start_time_seconds" in expr:
            return "seconds"
        if "rate(process_cpu_seconds_total" in expr:
            return "cpu"
        if "rate(" in expr and "_total" in expr and "increase(" not in expr:
            return "rate"
        if "_bytes" in expr:
            return "bytes"
        return "count"  # gauges of counts and states, increase() of counters

    def test_units_match_each_query(self):
        for p in self.dash["panels"]:
            if p["type"] != "timeseries":
                continue
            unit = p["fieldConfig"]["defaults"].get("unit")
            kinds = {self.measures(t["expr"]) for t in p["targets"]}
            self.assertEqual(len(kinds), 1, f"{p['title']}: queries of different kinds {kinds}")
            (kind,) = kinds
            # A rate of something other than requests or operations (tokens)
            # says what it counts per second in a custom suffix unit.
            custom_rate = kind == "rate" and unit.startswith("suffix:") and unit.endswith("/s")
            self.assertTrue(unit in self.UNITS[kind] or custom_rate,
                            f"{p['title']}: unit {unit} for {kind}")

    def test_a_mixed_panel_would_be_caught(self):
        self.assertEqual(self.measures("max(process_resident_memory_bytes)"), "bytes")
        self.assertEqual(self.measures("max(process_open_fds)"), "count")
        self.assertEqual(
            self.measures("histogram_quantile(0.5, sum by (le) (rate(narwhal_tpot_seconds_bucket[1m])))"),
            "seconds")
        self.assertEqual(self.measures("sum(rate(narwhal_requests_total[1m]))"), "rate")

    def test_covers_what_an_operator_needs(self):
        exprs = " ".join(t["expr"] for p in self.dash["panels"] for t in p.get("targets", []))
        for needed in ("narwhal_requests_total", "narwhal_ttft_seconds_bucket",
                       "narwhal_first_byte_seconds_bucket", "narwhal_handoff_seconds_bucket",
                       "narwhal_decode_tokens_total", "sum by (iid, phase) (narwhal_engine_inflight",
                       "narwhal_engine_breaker_streak", "narwhal_engine_held",
                       "narwhal_engine_quarantined", "narwhal_engine_probes_total",
                       "narwhal_retry_attempts_total", "narwhal_retry_denied_total",
                       "narwhal_tpot_seconds_bucket", "narwhal_handoffs_abandoned_total",
                       "narwhal_handoff_releases_total", "narwhal_placement_decisions_total",
                       "process_open_fds", "process_start_time_seconds"):
            self.assertIn(needed, exprs)
        text = " ".join(p.get("options", {}).get("content", "") for p in self.dash["panels"])
        self.assertIn("ttft_s", text)
        self.assertIn("first_byte_s", text)


class SystemdUnitTest(unittest.TestCase):
    def unit(self):
        sections, current = {}, None
        for line in read("deploy/systemd/narwhal.service").splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if line.startswith("["):
                current = sections.setdefault(line.strip("[]"), {})
            else:
                key, value = line.split("=", 1)
                current.setdefault(key, []).append(value)
        return sections

    def test_structure(self):
        unit = self.unit()
        self.assertEqual(set(unit), {"Unit", "Service", "Install"})
        service = unit["Service"]
        (exec_start,) = service["ExecStart"]
        argv = shlex.split(exec_start)
        self.assertEqual(argv[0], "/usr/local/bin/narwhal-serve")
        self.assertIn("--config", argv)
        self.assertNotIn("--preflight", argv, "a preflight at start-up fails while engines load")
        self.assertEqual(service["KillSignal"], ["SIGTERM"])
        stop = float(service["TimeoutStopSec"][0])
        graceful = fleet()["serving"]["graceful_timeout_s"]
        self.assertGreater(stop, graceful, "TimeoutStopSec must outlast serving.graceful_timeout_s")
        self.assertTrue(service.get("DynamicUser") == ["yes"] or "User" in service)
        self.assertEqual(unit["Install"]["WantedBy"], ["multi-user.target"])

    def test_systemd_analyze_verify(self):
        analyze = shutil.which("systemd-analyze")
        if not analyze:
            self.skipTest("systemd-analyze not available (the structural test ran)")
        bindir = os.path.dirname(os.environ["NARWHAL_SERVE_BIN"])
        text = read("deploy/systemd/narwhal.service").replace("/usr/local/bin/", bindir + "/")
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "narwhal.service")
            with open(path, "w") as f:
                f.write(text)
            out = subprocess.run([analyze, "verify", path], capture_output=True, text=True,
                                 timeout=60)
            # verify reports bad settings on stderr yet may exit 0.
            self.assertEqual((out.returncode, out.stdout + out.stderr), (0, ""))
            with open(path, "w") as f:
                f.write(text.replace("KillMode=mixed", "KillMode=bogus"))
            bad = subprocess.run([analyze, "verify", path], capture_output=True, text=True,
                                 timeout=60)
            self.assertIn("bogus", bad.stdout + bad.stderr)


class VllmFleetTest(unittest.TestCase):
    def check(self, path):
        return subprocess.run([os.environ["NARWHAL_CHECK_BIN"], "--config", path, "--json"],
                              capture_output=True, text=True, timeout=90)

    def test_fleet_file_passes_config_validation(self):
        # No engine is live: the config loads, preflight runs and fails only
        # its reach gate (the later gates are skipped). An invalid config
        # would exit 1 before any report.
        out = self.check(os.path.join(DEPLOY, "vllm", "fleet.json"))
        self.assertEqual(out.returncode, 1, out.stderr)
        self.assertNotRegex(out.stderr, r"narwhal-check: config")
        report = json.loads(out.stdout)
        gates = {g["name"]: g["outcome"] for g in report["gates"]}
        self.assertEqual(gates["reach"], "failed")
        self.assertEqual({k for k, v in gates.items() if v == "failed"}, {"reach"})
        iids = {c["iid"] for c in report["checks"]}
        self.assertEqual(iids, {e["iid"] for e in fleet()["engines"]})

    def test_an_invalid_fleet_file_is_refused_before_preflight(self):
        broken = fleet()
        broken["serving"]["graceful_timeout_s"] = -1
        with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
            json.dump(broken, f)
            f.flush()
            out = self.check(f.name)
        self.assertEqual(out.returncode, 1)
        self.assertEqual(out.stdout, "")
        self.assertIn("serving.graceful_timeout_s", out.stderr)

    def test_two_prefill_and_two_decode_engines_with_their_commands(self):
        f = fleet()
        roles = sorted(e["role"] for e in f["engines"])
        self.assertEqual(roles, ["decode", "decode", "prefill", "prefill"])
        readme = read("deploy/vllm/README.md")
        blocks = re.findall(r"```sh\n(.*?)```", readme, re.S)
        commands = [b for b in blocks if "vllm serve" in b]
        self.assertEqual(len(commands), len(f["engines"]))
        for engine in f["engines"]:
            (cmd,) = [c for c in commands if f'"engine_id":"{engine["kv_engine_id"]}"' in c]
            self.assertIn(f'vllm serve {f["engine_contract"]["model"]} ', cmd)
            self.assertIn(f"--port {port_of(engine['url'])}", cmd)
            self.assertIn(f"--max-model-len {f['engine_contract']['max_model_len']}", cmd)
            self.assertIn("--enable-prompt-tokens-details", cmd)
            self.assertIn("VLLM_NIXL_SIDE_CHANNEL_HOST=", cmd)
            self.assertIn("VLLM_NIXL_SIDE_CHANNEL_PORT=", cmd)
            config = json.loads(re.search(r"--kv-transfer-config '([^']*)'", cmd).group(1))
            self.assertEqual(config["kv_connector"], f["engine_contract"]["connector"])
            lease = config["kv_connector_extra_config"]["kv_lease_duration"]
            self.assertEqual(lease, f["handoff"]["lease_s"])
            self.assertIn(f'On host `{engine["url"].split("//")[1].split(":")[0]}`',
                          readme.split(cmd)[0].rsplit("```sh", 1)[0][-200:])


if __name__ == "__main__":
    unittest.main()
