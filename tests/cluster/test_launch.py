"""`haltwise serve --replicas 1` end to end: a local loopback cluster, a request, SIGTERM, exit 0."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys

import httpx
import pytest

from tests.server.http_helpers import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_replicas_starts_serves_and_drains(tmp_path) -> None:
    pytest.importorskip("ray.serve", reason="the cluster extra is not installed")
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log = open(tmp_path / "serve.log", "w")  # a file, not a pipe: Ray's logs would fill a pipe and block
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "haltwise.cli", "serve", "--tiny", "--replicas", "1",
                             "--replica-cpus", "0.5", "--port", str(port), "--shutdown-grace", "2"],
                            env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        def ready() -> bool:
            try:
                return httpx.get(f"{url}/ready", timeout=5).status_code == 200
            except httpx.TransportError:
                return proc.poll() is not None
        assert wait_until(ready, 240) and proc.poll() is None, (tmp_path / "serve.log").read_text()[-3000:]
        r = httpx.post(f"{url}/v1/completions", json={"prompt": "hi", "max_tokens": 3}, timeout=60)
        assert r.status_code == 200 and r.headers["x-haltwise-replica"]
        cluster = httpx.get(f"{url}/cluster", timeout=10).json()["replicas"]
        assert [row["node"] for row in cluster] == ["127.0.0.1"]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(90) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        log.close()
