"""narwhal-sim processes for the Python API's tests.

Sim.start() spawns the narwhal-sim binary the project built (NARWHAL_SIM_BIN)
on a free port (--port 0), waits for its ready line
("narwhal-sim ready port=N engine_id=ID") and wraps its control endpoints
(POST/DELETE /sim/faults, GET /sim/requests, GET /sim/kv, SPEC §10). The
engine runs with --exit-on-stdin-eof and its stdin is a pipe held here, so a
test process that dies takes its engines with it.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import time
import urllib.request
from typing import Any, Dict, List, Optional


def sim_binary() -> str:
    path = os.environ.get("NARWHAL_SIM_BIN", "")
    if not path:
        raise RuntimeError("NARWHAL_SIM_BIN names no narwhal-sim binary")
    return path


class Sim:
    def __init__(self, proc: subprocess.Popen, port: int, engine_id: str) -> None:
        self.proc = proc
        self.port = port
        self.engine_id = engine_id
        self.url = f"http://127.0.0.1:{port}"

    @classmethod
    def start(cls, engine_id: str, *args: str, ready_timeout_s: float = 10.0,
              env: Optional[Dict[str, str]] = None) -> "Sim":
        argv = [sim_binary(), "--port", "0", "--host", "127.0.0.1", "--engine-id", engine_id,
                "--exit-on-stdin-eof", *args]
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0,
                                env={**os.environ, **(env or {})})
        deadline = time.monotonic() + ready_timeout_s
        line = b""
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([proc.stdout], [], [], left)[0]:
                proc.kill()
                proc.wait()
                raise RuntimeError(f"narwhal-sim {engine_id} printed no ready line")
            byte = proc.stdout.read(1)
            if not byte:
                proc.wait()
                raise RuntimeError(f"narwhal-sim {engine_id} exited ({proc.returncode})")
            line += byte
        fields = dict(f.split("=", 1) for f in line.decode().split()[2:])
        return cls(proc, int(fields["port"]), fields["engine_id"])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()

    # --- control endpoints ------------------------------------------------------

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=5) as resp:
            return json.loads(resp.read() or b"null")

    def set_faults(self, *rules: Dict[str, Any]) -> None:
        self._call("POST", "/sim/faults", {"faults": list(rules)})

    def clear_faults(self) -> None:
        self._call("DELETE", "/sim/faults")

    def requests(self) -> List[Dict[str, Any]]:
        """The inference requests the engine received, oldest first."""
        return [r for r in self._call("GET", "/sim/requests")["requests"] if r.get("phase")]

    def clear_requests(self) -> None:
        self._call("DELETE", "/sim/requests")

    def kv(self) -> Dict[str, Any]:
        return self._call("GET", "/sim/kv")

    def ended_requests(self, timeout_s: float = 5.0) -> List[Dict[str, Any]]:
        """requests() once every one has ended: a client can read a stream's
        last chunk before the engine has recorded how the stream ended."""
        return self.wait_for(lambda rs: all(r.get("end") for r in rs), timeout_s)

    def wait_for(self, predicate, timeout_s: float = 5.0) -> List[Dict[str, Any]]:
        """Polls requests() until predicate(records) holds; returns them."""
        deadline = time.monotonic() + timeout_s
        while True:
            records = self.requests()
            if predicate(records) or time.monotonic() > deadline:
                return records
            time.sleep(0.02)
