"""Starts a live narwhal-serve on its embedded simulated fleet on loopback.

Every listener binds port 0; the ports come from the ready line
(`narwhal-serve ready http=H:P grpc=H:P admin=H:P`). Used by the deploy
tests that need real /metrics output or a real scrape target.
"""

import json
import os
import re
import select
import signal
import subprocess
import time
import urllib.error
import urllib.request

READY_TIMEOUT_S = 30


class ServeProcess:
    """A narwhal-serve child process; use as a context manager."""

    def __init__(self, binary=None, extra_args=()):
        self.binary = binary or os.environ["NARWHAL_SERVE_BIN"]
        self.extra_args = list(extra_args)
        self.proc = None
        self._stderr = None
        self.http = self.grpc = self.admin = self.health = None

    def __enter__(self):
        import tempfile
        self._stderr = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(
            [self.binary, "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0",
             "--admin", "127.0.0.1:0", *self.extra_args],
            stdout=subprocess.PIPE, stderr=self._stderr, text=True)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.stop()
                raise RuntimeError("narwhal-serve printed no ready line")
            ready, _, _ = select.select([self.proc.stdout], [], [], left)
            if not ready:
                continue
            line = self.proc.stdout.readline()
            if not line:
                code = self.proc.wait()
                raise RuntimeError(f"narwhal-serve exited ({code}) before it was ready")
            if line.startswith("narwhal-serve ready "):
                fields = dict(f.split("=", 1) for f in line.split()[2:])
                self.http, self.grpc, self.admin = fields["http"], fields["grpc"], fields["admin"]
                self.health = fields.get("health")  # with --health or listen.health
                return self

    def __exit__(self, *exc):
        self.stop()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc and self.proc.stdout:
            self.proc.stdout.close()
        if self._stderr:
            self._stderr.close()
            self._stderr = None

    def log(self):
        """What narwhal-serve wrote on stderr so far."""
        self._stderr.flush()
        self._stderr.seek(0)
        return self._stderr.read()

    def sim_engines(self):
        """{iid: "127.0.0.1:PORT"} of the embedded simulated engines, from
        their start-up log lines."""
        return dict(re.findall(r"narwhal-sim\[([A-Za-z0-9._-]+)\] listening on (\S+)", self.log()))

    def post_json(self, url, document):
        req = urllib.request.Request(url, data=json.dumps(document).encode(),
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode()

    def get(self, path):
        with urllib.request.urlopen(f"http://{self.http}{path}", timeout=10) as resp:
            return resp.read().decode()

    def complete(self, prompt="Tell me about narwhals", max_tokens=4, stream=False):
        return self.post_json(f"http://{self.http}/v1/completions",
                              {"model": "Qwen/Qwen3-0.6B", "prompt": prompt,
                               "max_tokens": max_tokens, "stream": stream})

    def chat(self, content="Tell me about narwhals", max_tokens=4):
        return self.post_json(f"http://{self.http}/v1/chat/completions",
                              {"model": "Qwen/Qwen3-0.6B", "max_tokens": max_tokens,
                               "messages": [{"role": "user", "content": content}]})


def metric_names(exposition):
    """The metric family names of a Prometheus text exposition: every
    `# TYPE` family plus each sample's name (so histogram _bucket/_sum/_count
    series count too)."""
    names = set()
    for line in exposition.splitlines():
        if line.startswith("# TYPE ") or line.startswith("# HELP "):
            names.add(line.split()[2])
        elif line and not line.startswith("#"):
            names.add(line.split("{", 1)[0].split(" ", 1)[0])
    return names


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
