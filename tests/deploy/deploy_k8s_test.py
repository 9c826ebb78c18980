"""deploy/k8s with TLS off (the base) and on (the tls/ overlay), rendered
without kustomize: every probe reaches a listener that speaks its protocol,
and run as a kubelet runs them against a live narwhal-serve (on narwhal-sim
engines) they pass, keep the replica in the Service while every decode engine
is out (clients get 503 with Retry-After, not refused connections), and the
PodDisruptionBudget never blocks a drain. The dns/ overlay's fleet file names
its headless Services as DNS groups and passes narwhal-check's validation."""

import copy
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import unittest
import urllib.error
import urllib.request

import yaml

from serve_process import ServeProcess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
K8S = os.path.join(ROOT, "deploy", "k8s")
VARIANTS = {"plaintext": K8S, "tls": os.path.join(K8S, "tls")}
DNS_OVERLAY = os.path.join(K8S, "dns")


# ----------------------------------------------------------------- rendering

def _pointer(path):
    return [p.replace("~1", "/").replace("~0", "~") for p in path.lstrip("/").split("/")]


def apply_json6902(doc, ops):
    """RFC 6902 add / replace / remove, as kustomize applies a JSON patch."""
    for op in ops:
        *parents, last = _pointer(op["path"])
        node = doc
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        if isinstance(node, list):
            index = len(node) if last == "-" else int(last)
            if op["op"] == "add":
                node.insert(index, copy.deepcopy(op["value"]))
            elif op["op"] == "replace":
                node[index] = copy.deepcopy(op["value"])
            elif op["op"] == "remove":
                del node[index]
            else:
                raise ValueError(f"unsupported op {op['op']}")
        else:
            if op["op"] in ("replace", "remove") and last not in node:
                raise KeyError(f"{op['path']}: nothing to {op['op']}")
            if op["op"] in ("add", "replace"):
                node[last] = copy.deepcopy(op["value"])
            elif op["op"] == "remove":
                del node[last]
            else:
                raise ValueError(f"unsupported op {op['op']}")
    return doc


def render(directory):
    """The documents `kubectl apply -k directory` applies: resources (files or
    kustomization directories) and JSON 6902 patches with a kind/name target.
    Any other kustomize feature fails the test rather than being ignored."""
    with open(os.path.join(directory, "kustomization.yaml")) as f:
        kust = yaml.safe_load(f)
    unknown = set(kust) - {"apiVersion", "kind", "resources", "patches"}
    if unknown:
        raise ValueError(f"{directory}: kustomization fields this renderer lacks: {unknown}")
    docs = []
    for resource in kust["resources"]:
        path = os.path.normpath(os.path.join(directory, resource))
        if os.path.isdir(path):
            docs += render(path)
        else:
            with open(path) as f:
                docs += [d for d in yaml.safe_load_all(f) if d is not None]
    for patch in kust.get("patches", []):
        with open(os.path.join(directory, patch["path"])) as f:
            ops = yaml.safe_load(f)
        target = patch["target"]
        matched = [d for d in docs
                   if d["kind"] == target["kind"] and d["metadata"]["name"] == target["name"]]
        if len(matched) != 1:
            raise ValueError(f"patch {patch['path']} matches {len(matched)} resources")
        apply_json6902(matched[0], ops)
    return docs


class Manifests:
    def __init__(self, directory):
        self.docs = render(directory)

    def one(self, kind):
        (doc,) = [d for d in self.docs if d["kind"] == kind]
        return doc

    def fleet(self):
        return json.loads(self.one("ConfigMap")["data"]["fleet.json"])

    def container(self):
        (c,) = self.one("Deployment")["spec"]["template"]["spec"]["containers"]
        return c

    def probes(self):
        c = self.container()
        return {k: c[k] for k in ("livenessProbe", "readinessProbe", "startupProbe") if k in c}

    def port_number(self, port):
        named = {p["name"]: p["containerPort"] for p in self.container()["ports"]}
        return named.get(port, port)


def listener_of(fleet, port):
    """Which of the fleet's listeners a container port is."""
    for name in ("http", "grpc", "health"):
        address = fleet["listen"].get(name)
        if address and int(address.rsplit(":", 1)[1]) == port:
            return name
    return None


def probe_problem(manifests, probe):
    """Why a kubelet running `probe` cannot get an answer, or None."""
    fleet = manifests.fleet()
    tls = bool(fleet.get("tls"))
    if "httpGet" in probe:
        get = probe["httpGet"]
        listener = listener_of(fleet, manifests.port_number(get["port"]))
        scheme = get.get("scheme", "HTTP")
        if listener == "health":
            return None if scheme == "HTTP" else "the health listener is plaintext"
        if listener == "http":
            want = "HTTPS" if tls else "HTTP"
            return None if scheme == want else f"the HTTP door speaks {want}"
        return f"httpGet on the {listener} listener"
    if "grpc" in probe:
        listener = listener_of(fleet, manifests.port_number(probe["grpc"]["port"]))
        if listener != "grpc":
            return f"grpc probe on the {listener} listener"
        return "the kubelet's gRPC probe does not speak TLS" if tls else None
    if "tcpSocket" in probe:
        return None
    return f"probe kind this test cannot judge: {sorted(probe)}"


class ManifestTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.variants = {name: Manifests(d) for name, d in VARIANTS.items()}

    def test_every_probe_reaches_a_listener_that_speaks_its_protocol(self):
        for name, m in self.variants.items():
            probes = m.probes()
            self.assertIn("livenessProbe", probes, name)
            self.assertIn("readinessProbe", probes, name)
            for kind, probe in probes.items():
                self.assertIsNone(probe_problem(m, probe), f"{name} {kind}")

    def test_the_previous_probes_fail_once_tls_is_on(self):
        # Readiness on the door in plaintext and the kubelet's gRPC liveness:
        # fine without TLS, unanswerable with it (the pod restarted every minute).
        old = [{"httpGet": {"path": "/ready", "port": "http"}},
               {"grpc": {"port": 50051, "service": "narwhal.liveness"}}]
        for probe in old:
            self.assertIsNone(probe_problem(self.variants["plaintext"], probe))
            self.assertIsNotNone(probe_problem(self.variants["tls"], probe))

    def test_readiness_means_this_router_answers_and_liveness_the_process(self):
        for name, m in self.variants.items():
            probes = m.probes()
            self.assertEqual(probes["readinessProbe"]["httpGet"]["path"], "/serving", name)
            self.assertEqual(probes["livenessProbe"]["httpGet"]["path"], "/health", name)
            # Liveness gives a stuck process a minute, readiness reacts fast.
            live = probes["livenessProbe"]
            self.assertGreaterEqual(live["periodSeconds"] * live["failureThreshold"], 60)

    def test_the_probe_port_is_not_in_the_service(self):
        for name, m in self.variants.items():
            targets = {p["targetPort"] for p in m.one("Service")["spec"]["ports"]}
            self.assertNotIn("probes", targets, name)

    def test_disruption_budget_never_blocks_a_drain(self):
        for name, m in self.variants.items():
            spec = m.one("PodDisruptionBudget")["spec"]
            self.assertEqual(spec.get("unhealthyPodEvictionPolicy"), "AlwaysAllow", name)
            self.assertNotIn("minAvailable", spec, "minAvailable blocks drains at one replica")
            self.assertEqual(spec["maxUnavailable"], 1, name)

    def test_tls_overlay_adds_tls_and_changes_nothing_else(self):
        base, tls = self.variants["plaintext"], self.variants["tls"]
        self.assertNotIn("tls", base.fleet())
        fleet = tls.fleet()
        files = fleet.pop("tls")
        self.assertEqual(fleet, base.fleet())
        # The files are in the mounted Secret.
        spec = tls.one("Deployment")["spec"]["template"]["spec"]
        mounts = {m["name"]: m["mountPath"] for m in tls.container()["volumeMounts"]}
        (volume,) = [v for v in spec["volumes"] if "secret" in v]
        self.assertEqual(volume["secret"]["secretName"], "narwhal-tls")
        for key, name in (("cert_file", "tls.crt"), ("key_file", "tls.key")):
            self.assertEqual(files[key], os.path.join(mounts[volume["name"]], name))
        self.assertEqual(spec["securityContext"]["fsGroup"], spec["securityContext"]["runAsGroup"])
        # Scrapes and the Service's protocols follow the doors.
        (endpoint,) = tls.one("ServiceMonitor")["spec"]["endpoints"]
        self.assertEqual(endpoint["scheme"], "https")
        self.assertEqual(endpoint["tlsConfig"]["ca"]["secret"]["name"], "narwhal-tls")
        protocols = {p["name"]: p["appProtocol"] for p in tls.one("Service")["spec"]["ports"]}
        self.assertEqual(protocols, {"http": "https", "grpc": "https"})
        self.assertNotIn("scheme", base.one("ServiceMonitor")["spec"]["endpoints"][0])
        # Every other resource is the base's.
        for kind in ("PodDisruptionBudget", "PrometheusRule"):
            self.assertEqual(tls.one(kind), base.one(kind), kind)
        self.assertEqual(tls.probes(), base.probes())

    def test_renderer_applies_json_patches(self):
        doc = {"a": [1, 2], "b": {"c": 1}}
        apply_json6902(doc, [{"op": "add", "path": "/a/-", "value": 3},
                             {"op": "replace", "path": "/b/c", "value": 2},
                             {"op": "add", "path": "/b/d~1e", "value": 4},
                             {"op": "remove", "path": "/a/0"}])
        self.assertEqual(doc, {"a": [2, 3], "b": {"c": 2, "d/e": 4}})
        with self.assertRaises(KeyError):
            apply_json6902(doc, [{"op": "replace", "path": "/b/x", "value": 1}])


class DnsOverlayTest(unittest.TestCase):
    """deploy/k8s/dns: the engines as DNS groups over headless Services."""

    @classmethod
    def setUpClass(cls):
        cls.base = Manifests(K8S)
        cls.dns = Manifests(DNS_OVERLAY)

    def services(self):
        return {d["metadata"]["name"]: d for d in self.dns.docs if d["kind"] == "Service"}

    def test_each_role_is_a_dns_group_over_a_headless_service(self):
        fleet = self.dns.fleet()
        self.assertEqual(sorted(e["role"] for e in fleet["engines"]), ["decode", "prefill"])
        services = self.services()
        for entry in fleet["engines"]:
            self.assertNotIn("url", entry)
            # One vLLM engine_id per pod: a group cannot pin one.
            self.assertNotIn("kv_engine_id", entry)
            service = services[entry["dns"]]
            spec = service["spec"]
            self.assertEqual(spec["clusterIP"], "None", entry["dns"])
            self.assertFalse(spec.get("publishNotReadyAddresses", False), entry["dns"])
            self.assertEqual(spec["selector"]["app.kubernetes.io/component"], entry["role"])
            self.assertEqual([p["port"] for p in spec["ports"]], [entry["port"]])
            self.assertEqual(spec["ports"][0]["targetPort"], entry["port"])
        # The router's own Service is the base's.
        self.assertEqual(services["narwhal"], self.base.one("Service"))

    def test_only_the_engines_and_their_discovery_change(self):
        fleet, base = self.dns.fleet(), self.base.fleet()
        for doc in (fleet, base):
            for key in ("_comment", "engines", "discovery", "membership"):
                doc.pop(key, None)
        self.assertEqual(fleet, base)
        for kind in ("Deployment", "PodDisruptionBudget", "PrometheusRule", "ServiceMonitor"):
            self.assertEqual(self.dns.one(kind), self.base.one(kind), kind)

    def test_the_fleet_file_passes_validation(self):
        with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
            json.dump(self.dns.fleet(), f)
            f.flush()
            out = subprocess.run([os.environ["NARWHAL_CHECK_BIN"], "--config", f.name,
                                  "--validate-only"], capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)


# --------------------------------------------------------------------- live

def run_probe(probe, address):
    """One probe as the kubelet runs it against HOST:PORT: HTTP(S) GET with no
    certificate check, success on 200-399; TCP connect."""
    host, port = address.rsplit(":", 1)
    timeout = probe.get("timeoutSeconds", 1)
    if "tcpSocket" in probe:
        try:
            socket.create_connection((host, int(port)), timeout=timeout).close()
            return True
        except OSError:
            return False
    get = probe["httpGet"]
    scheme = get.get("scheme", "HTTP").lower()
    context = ssl._create_unverified_context() if scheme == "https" else None
    try:
        with urllib.request.urlopen(f"{scheme}://{address}{get['path']}", timeout=timeout,
                                    context=context) as resp:
            status = resp.status
    except urllib.error.HTTPError as err:
        status = err.code
    except (urllib.error.URLError, OSError):
        return False
    return 200 <= status < 400


def wait_for(predicate, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


class Sim:
    """A narwhal-sim engine matching the fleet's engine contract."""

    def __init__(self, engine, contract):
        self.proc = subprocess.Popen(
            [os.environ["NARWHAL_SIM_BIN"], "--port", "0", "--engine-id", engine["kv_engine_id"],
             "--role", engine["role"], "--model", contract["model"], "--threads", "8",
             "--vllm-version", contract["vllm_version"],
             "--max-model-len", str(contract["max_model_len"])],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = self.proc.stdout.readline()
        self.port = int(re.search(r"port=(\d+)", line).group(1))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.proc.stdout.close()


class LiveProbeTest(unittest.TestCase):
    """The rendered Deployment's probes against a live narwhal-serve started
    from the rendered fleet file: one prefill and one decode engine (narwhal-
    sim), loopback ports, and short engine timeouts so the start-up window
    (connect + health timeout) and the ejection of a dead engine take seconds."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="narwhal-k8s-")
        self.sims = []

    def tearDown(self):
        for sim in self.sims:
            sim.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def config(self, manifests):
        fleet = manifests.fleet()
        engines = [next(e for e in fleet["engines"] if e["role"] == role)
                   for role in ("prefill", "decode")]
        for engine in engines:
            sim = Sim(engine, fleet["engine_contract"])
            self.sims.append(sim)
            engine["url"] = f"http://127.0.0.1:{sim.port}"
        fleet["engines"] = engines
        fleet["engine"].update(connect_timeout_s=1, health_timeout_s=1)
        fleet["recovery"].update(liveness_interval_s=0.5, liveness_misses=1)
        if "tls" in fleet:
            cert, key = os.path.join(self.tmp, "tls.crt"), os.path.join(self.tmp, "tls.key")
            subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                            "ec_paramgen_curve:P-256", "-nodes", "-days", "2", "-subj",
                            "/CN=narwhal", "-addext", "subjectAltName=DNS:narwhal,IP:127.0.0.1",
                            "-keyout", key, "-out", cert], check=True, capture_output=True)
            fleet["tls"] = {"cert_file": cert, "key_file": key}
        path = os.path.join(self.tmp, "fleet.json")
        with open(path, "w") as f:
            json.dump(fleet, f)
        return path, fleet

    def complete(self, serve, fleet):
        scheme = "https" if "tls" in fleet else "http"
        context = (ssl.create_default_context(cafile=fleet["tls"]["cert_file"])
                   if "tls" in fleet else None)
        body = {"model": fleet["model"], "prompt": "hi", "max_tokens": 2}
        req = urllib.request.Request(f"{scheme}://{serve.http}/v1/completions",
                                     data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30, context=context) as resp:
                return resp.status, dict(resp.headers)
        except urllib.error.HTTPError as err:
            return err.code, dict(err.headers)

    def check_variant(self, name):
        manifests = Manifests(VARIANTS[name])
        path, fleet = self.config(manifests)
        probes = manifests.probes()
        listeners = {}
        with ServeProcess(extra_args=["--config", path, "--health", "127.0.0.1:0"]) as serve:
            for listener in ("http", "grpc", "health"):
                listeners[listener] = getattr(serve, listener)

            def passes(kind):
                probe = probes[kind]
                port = manifests.port_number(next(iter(probe.values()))["port"])
                return run_probe(probe, listeners[listener_of(fleet, port)])

            self.assertTrue(passes("livenessProbe"), name)
            self.assertTrue(wait_for(lambda: passes("readinessProbe"), 15), name)
            self.assertEqual(self.complete(serve, fleet)[0], 200, name)
            if name == "tls":
                # What the Deployment probed before: the door in plaintext.
                old = {"httpGet": {"path": "/ready", "port": "http"}, "timeoutSeconds": 2}
                self.assertFalse(run_probe(old, serve.http))
            # Every decode engine out: the fleet cannot serve, the router can.
            self.sims[1].stop()
            health = f"http://{serve.health}/ready"
            self.assertTrue(wait_for(lambda: run_probe({"httpGet": {"path": "/ready"}},
                                                       serve.health) is False, 15), health)
            self.assertTrue(passes("readinessProbe"), f"{name}: readiness left the Service")
            self.assertTrue(passes("livenessProbe"), name)
            status, headers = self.complete(serve, fleet)
            self.assertEqual(status, 503, name)
            self.assertIn("Retry-After", headers, name)

    def test_probes_with_tls_off(self):
        self.check_variant("plaintext")

    def test_probes_with_tls_on(self):
        if not shutil.which("openssl"):
            self.skipTest("openssl (Debian's, with ca-certificates) missing")
        self.check_variant("tls")


if __name__ == "__main__":
    unittest.main()
