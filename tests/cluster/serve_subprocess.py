"""`haltwise serve --replicas ...` as a real subprocess on a loopback Ray cluster, ready when /ready answers 200."""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import httpx

from tests.server.http_helpers import wait_until
from tests.server.serve_process import free_port, stop_process


@contextlib.contextmanager
def replica_server(args: list[str], log_path: Path, ready_limit_s: float) -> Iterator[tuple[subprocess.Popen, str]]:
    """(process, base url) of `haltwise serve ARGS --port P` once ready; stopped (terminate, then kill) after.
    The log goes to a file, not a pipe: Ray's logs would fill a pipe and block the server."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "OMP_NUM_THREADS": "1"}
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "haltwise.cli", "serve", *args, "--port", str(port),
                                 "--shutdown-grace", "2"], env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            def ready() -> bool:
                try:
                    return httpx.get(f"{url}/ready", timeout=5).status_code == 200
                except httpx.TransportError:
                    return proc.poll() is not None
            assert wait_until(ready, ready_limit_s) and proc.poll() is None, log_path.read_text()[-4000:]
            yield proc, url
        finally:
            stop_process(proc, 60, 30)
