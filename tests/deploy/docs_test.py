"""docs/ says what the code does: every behaviour B1-B19 has a section whose
tests exist; configuration.md names exactly the schema's keys; every admin RPC
has a buf curl and a grpcurl example, and each buf curl line works against a
live narwhal-serve; every client-visible error type has a troubleshooting
section; every narwhal-sim fault kind is documented with an example a live
narwhal-sim accepts; the README links the docs."""

import glob
import json
import os
import re
import select
import subprocess
import time
import unittest
import urllib.error
import urllib.request

from serve_process import ServeProcess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCS = ("behaviours.md", "configuration.md", "operations.md", "troubleshooting.md",
        "sim-faults.md", "architecture.md")


def read(path):
    with open(os.path.join(ROOT, path)) as f:
        return f.read()


def sections(text, level):
    """{heading: body} of the headings at `level` (## or ###)."""
    marker = "#" * level + " "
    parts = re.split(rf"^{marker}(.+)$", text, flags=re.M)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts), 2)}


def schema_keys():
    src = read("proto/narwhal/config/v1/config.proto")
    msgs = {}
    for m in re.finditer(r"^message (\w+) \{\n(.*?)^\}", src, re.S | re.M):
        msgs[m.group(1)] = [
            (f.group(1) or "", f.group(2), f.group(3), bool(f.group(4)))
            for f in re.finditer(r"^  (optional |repeated )?([\w.]+) (\w+) = \d+( \[\(doc\))?",
                                 m.group(2), re.M)]

    def keys(msg, prefix):
        out = []
        for label, typ, name, doc in msgs[msg]:
            key = prefix + name
            if typ in msgs:
                if doc:
                    out.append(key)
                out += keys(typ, key + ("[]." if label.strip() == "repeated" else "."))
            else:
                out.append(key)
        return out

    return keys("FleetConfig", "")


def all_test_sources():
    return {path: read(path) for path in
            glob.glob("tests/**/*.cc", root_dir=ROOT, recursive=True)
            + glob.glob("tests/**/*.py", root_dir=ROOT, recursive=True)}


class BehavioursTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.text = read("docs/behaviours.md")
        cls.sections = {k.split()[0]: v for k, v in sections(cls.text, 2).items()
                        if re.match(r"B\d+ ", k)}

    def test_every_behaviour_has_one_section_in_order(self):
        headings = re.findall(r"^## (B\d+) ", self.text, re.M)
        self.assertEqual(headings, [f"B{n}" for n in range(1, 20)])

    def test_each_section_has_rule_error_metrics_and_tests(self):
        for b, body in self.sections.items():
            rule = body.split("- **Error text:**")[0].strip()
            self.assertGreater(len(rule), 80, f"{b}: no rule")
            for field in ("- **Error text:**", "- **Metrics:**", "- **Tests:**"):
                self.assertIn(field, body, f"{b}: missing {field}")
            self.assertRegex(body, r"  - `[A-Za-z0-9_.]+` \(tests/", f"{b}: no test listed")

    def test_every_listed_test_exists_where_it_says(self):
        sources = all_test_sources()
        listed = 0
        for b, body in self.sections.items():
            for name, path in re.findall(r"^  - `([A-Za-z0-9_.]+)` \((tests/[^)]+)\)$", body, re.M):
                listed += 1
                self.assertIn(path, sources, f"{b}: {path} does not exist")
                if "." in name:
                    suite, test = name.split(".", 1)
                    pattern = rf"\bTEST(_F|_P)?\(\s*{suite},\s*{test}\s*\)"
                else:
                    pattern = rf"\bdef {name}\("
                self.assertRegex(sources[path], pattern, f"{b}: {name} not in {path}")
                self.assertTrue(re.search(rf"(^|[._]){b}(?!\d)", name.replace("test_", ".")),
                                f"{name} listed under {b}")
        self.assertGreater(listed, 150)

    def test_metrics_named_exist(self):
        sources = "".join(read(p) for p in glob.glob("router/**/*.cc", root_dir=ROOT, recursive=True)
                          + glob.glob("server/**/*.cc", root_dir=ROOT, recursive=True))
        for doc in DOCS:
            for name in set(re.findall(r"\bnarwhal_[a-z0-9_]+", read(f"docs/{doc}"))):
                base = re.sub(r"_(bucket|sum|count)$", "", name)
                self.assertIn(f'"{base}"', sources, f"docs/{doc}: unknown metric {name}")

    def test_every_spec_section_cited_in_the_tree_has_a_row(self):
        rows = set(re.findall(r"^\| SPEC §(\d+) \|", self.text, re.M))
        cited = set()
        for pattern in ("**/*.cc", "**/*.h", "**/*.proto", "**/*.py", "**/*.md", "**/*.mjs"):
            for path in glob.glob(pattern, root_dir=ROOT, recursive=True):
                if "node_modules" in path or path.startswith("build"):
                    continue
                cited.update(re.findall(r"SPEC §(\d+)", read(path)))
        self.assertGreater(len(cited), 5)
        self.assertEqual(sorted(cited - rows, key=int), [])

    def test_ttft_and_first_byte_are_set_against_vllms_ttft(self):
        (table,) = [v for k, v in sections(self.text, 2).items() if "vLLM's TTFT" in k]
        self.assertIn("`ttft_s`", table)
        self.assertIn("`first_byte_s`", table)
        self.assertIn("producer's prefill HTTP call completes", table)
        self.assertIn("first generated token", table)
        self.assertIn("vllm:time_to_first_token_seconds", table)


class ConfigurationTest(unittest.TestCase):
    def test_names_exactly_the_schema_keys(self):
        keys = set(schema_keys())
        self.assertGreater(len(keys), 50)
        text = read("docs/configuration.md")
        mentioned = set(re.findall(r"`([a-z_]+(?:\[\])?(?:\.[a-z_]+(?:\[\])?)*)`", text))
        sections = {k.split(".")[0].split("[")[0] for k in keys}
        self.assertEqual(sorted(keys - mentioned), [], "schema keys missing from the page")
        strays = {m for m in mentioned if "." in m and m.split(".")[0].split("[")[0] in sections}
        self.assertEqual(sorted(strays - keys), [], "keys the schema does not have")

    def test_schema_keys_are_the_readme_table(self):
        readme = read("README.md")
        table = readme.split("| key | default | valid values | meaning |", 1)[1].split("\n\n", 1)[0]
        rows = set(re.findall(r"^\| `([^`]+)` \|", table, re.M))
        self.assertEqual(rows, set(schema_keys()))


class OperationsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.text = read("docs/operations.md")
        cls.rpcs = re.findall(r"^\s*rpc (\w+)\(", read("proto/narwhal/admin/v1/admin.proto"), re.M)
        blocks = re.findall(r"```sh\n(.*?)```", cls.text, re.S)
        lines = [l for b in blocks for l in b.splitlines()]
        cls.buf = [l for l in lines if l.startswith("buf curl ")]
        cls.grpcurl = [l for l in lines if l.startswith("grpcurl ")]

    def test_every_admin_rpc_has_buf_curl_and_grpcurl(self):
        self.assertGreaterEqual(len(self.rpcs), 12)
        for rpc in self.rpcs:
            self.assertTrue(any(f"/narwhal.admin.v1.Admin/{rpc}" in l for l in self.buf), rpc)
            self.assertTrue(any(l.split()[-1] == f"narwhal.admin.v1.Admin/{rpc}"
                                for l in self.grpcurl), rpc)
        for line in self.grpcurl:
            self.assertIn("-plaintext", line)

    def test_buf_curl_examples_work_against_a_live_router(self):
        buf = os.environ["NARWHAL_BUF_BIN"]
        self.assertTrue(os.access(buf, os.X_OK), f"{buf} missing: run deploy/install-deps.sh")
        with ServeProcess() as serve:
            for line in self.buf:
                argv = json.loads(json.dumps(_shell_split(line)))
                argv[0] = buf
                argv = [a.replace("127.0.0.1:50052", serve.admin) for a in argv]
                rpc = next((a.rsplit("/", 1)[1] for a in argv if "/narwhal.admin.v1.Admin/" in a),
                           None)
                if rpc == "WatchEvents":
                    out = _run_for(argv, 30, until='"seq"')
                    self.assertIn('"seq"', out, line)
                    continue
                done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
                if rpc == "ReleaseQuarantine":
                    self.assertNotEqual(done.returncode, 0, line)
                    self.assertIn("failed_precondition", done.stderr.lower(), line)
                    continue
                if rpc == "ReloadConfig":  # the embedded fleet has no config file
                    self.assertNotEqual(done.returncode, 0, line)
                    self.assertIn("unavailable", done.stderr.lower(), line)
                    continue
                self.assertEqual(done.returncode, 0, f"{line}\n{done.stderr}")
                if rpc is None:
                    self.assertIn("narwhal.admin.v1.Admin/ListEngines", done.stdout)
                    continue
                answer = json.loads(done.stdout or "{}")
                if rpc == "ReadmitEngine":
                    self.assertTrue(answer.get("readmitted"), answer)
                if rpc == "ListEngines":
                    self.assertEqual({e["iid"] for e in answer["engines"]},
                                     {"p0", "p1", "d0", "d1"})


def _shell_split(line):
    import shlex
    return shlex.split(line)


def _run_for(argv, seconds, until=None):
    """Runs a streaming command for up to `seconds` (less once its output
    contains `until`), returns what it printed."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    # Unbuffered reads: a buffered reader could hold the rest of a quiet
    # stream's output where select() no longer sees it.
    fd = proc.stdout.fileno()
    out, deadline = b"", time.monotonic() + seconds
    while time.monotonic() < deadline and not (until and until.encode() in out):
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            out += chunk
    proc.kill()
    proc.wait()
    proc.stdout.close()
    return out.decode(errors="replace")


class TroubleshootingTest(unittest.TestCase):
    def test_every_error_type_has_a_section(self):
        types = set(re.findall(r'return "([a-z_]+)";',
                               read("server/status_table.cc").split("ErrorTypeName(ErrorType", 1)[1]))
        self.assertIn("handoff_expired", types)
        text = read("docs/troubleshooting.md")
        self.assertEqual(sorted(types - set(sections(text, 2))), [])

    def test_detail_texts_are_the_codes(self):
        text = " ".join(read("docs/troubleshooting.md").split())
        code = "".join(read(p) for p in glob.glob("router/**/*.cc", root_dir=ROOT, recursive=True)
                       + glob.glob("engines/http/*.cc", root_dir=ROOT))
        for detail in ("no handoff:", "invalid continuation:", "no first token within",
                       "engine went silent between tokens",
                       "stream ended before the [DONE] terminator",
                       "stream ended with [DONE] before any token arrived",
                       "KV handoff expired before decode dispatch", "router is shutting down",
                       "no engine in placement for the ", "prefill timed out after ",
                       "engine unreachable: connect to ",
                       "request deadline passed while the client was not reading",
                       "unassemblable decode response: "):
            self.assertTrue(detail.strip() in text, f"{detail!r} is not in troubleshooting.md")
            self.assertTrue(detail in code, f"{detail!r} is not in the code")


class SimFaultsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.text = read("docs/sim-faults.md")
        src = read("engines/sim/fault_rules.cc")
        cls.kinds = {name: set(re.findall(r'"(\w+)"', params)) for name, params in re.findall(
            r'\{FaultKind::k\w+,\s*"(\w+)",\s*\{([^}]*)\}\}', src)}

    def test_every_kind_has_a_section_with_its_parameters(self):
        # Every FaultKind enumerator of the header is in the parsed table.
        enum = re.search(r"enum class FaultKind \{([^}]*)\}", read("engines/sim/fault_rules.h"))
        self.assertEqual(len(self.kinds), len(re.findall(r"\bk\w+", enum.group(1))))
        docs = sections(self.text, 3)
        self.assertEqual(sorted(set(self.kinds) - set(docs)), [])
        for kind, params in self.kinds.items():
            for param in params:
                self.assertIn(f"`{param}`", docs[kind], f"{kind}: {param} undocumented")

    def test_examples_are_accepted_by_a_live_narwhal_sim(self):
        examples = [json.loads(b) for b in re.findall(r"```json\n(.*?)```", self.text, re.S)]
        inline = re.search(r"-d '(\{\"faults\".*?)'", self.text).group(1)
        examples.append(json.loads(inline))
        covered = {rule["kind"] for doc in examples for rule in doc["faults"]}
        self.assertEqual(sorted(set(self.kinds) - covered), [])
        proc = subprocess.Popen([os.environ["NARWHAL_SIM_BIN"], "--port", "0", "--engine-id", "x"],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            line = proc.stdout.readline()
            port = re.search(r"port=(\d+)", line).group(1)
            url = f"http://127.0.0.1:{port}/sim/faults"
            for doc in examples:
                status, body = _post(url, doc)
                self.assertEqual(status, 200, f"{doc}: {body}")
            status, body = _post(url, {"faults": [{"kind": "stall_after_tokens", "tokns": 3}]})
            self.assertEqual(status, 400)
            message = json.loads(body)["error"]["message"]
            self.assertTrue(message in " ".join(self.text.split()), message)
        finally:
            proc.terminate()
            proc.wait()
            proc.stdout.close()


def _post(url, doc):
    req = urllib.request.Request(url, data=json.dumps(doc).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


class ReadmeLinksTest(unittest.TestCase):
    def test_readme_links_every_doc(self):
        readme = read("README.md")
        for doc in DOCS:
            self.assertTrue(f"(docs/{doc})" in readme, f"README does not link docs/{doc}")


if __name__ == "__main__":
    unittest.main()
