"""`haltwise serve --replicas 1` end to end: a local loopback cluster, a request, SIGTERM, exit 0."""
from __future__ import annotations

import signal

import httpx
import pytest

from tests.cluster.serve_subprocess import replica_server

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def test_serve_replicas_starts_serves_and_drains(tmp_path) -> None:
    pytest.importorskip("ray.serve", reason="the cluster extra is not installed")
    args = ["--tiny", "--replicas", "1", "--replica-cpus", "0.5"]
    with replica_server(args, tmp_path / "serve.log", 240) as (proc, url):
        r = httpx.post(f"{url}/v1/completions", json={"prompt": "hi", "max_tokens": 3}, timeout=60)
        assert r.status_code == 200 and r.headers["x-haltwise-replica"]
        cluster = httpx.get(f"{url}/cluster", timeout=10).json()["replicas"]
        assert [row["node"] for row in cluster] == ["127.0.0.1"]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(90) == 0
