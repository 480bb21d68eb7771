"""`haltwise serve --tiny` as a real subprocess on a free loopback port, for tests of its flags."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
from typing import Any

import httpx

from tests.server.http_helpers import wait_until


def stop_process(proc: subprocess.Popen, grace_s: float, kill_wait_s: float | None = None) -> None:
    """A running process terminated, given grace_s to exit, then killed (and waited for, kill_wait_s)."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(kill_wait_s)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ServeProcess:
    """`with ServeProcess(["--header-timeout", "2"]) as s:` -- s.url, s.port; s.output() after exit."""

    def __init__(self, args: list[str], env: dict[str, str] | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.cmd = [sys.executable, "-m", "haltwise.cli", "serve", "--tiny", "--port", str(self.port),
                    "--served-model-name", "tiny", "--threads", "1", "--shutdown-grace", "1", *args]
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen[str] | None = None
        self._output = ""

    def __enter__(self) -> "ServeProcess":
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     env=self.env)
        if not wait_until(lambda: self.proc.poll() is not None or self._up(), 300) or self.proc.poll() is not None:
            self.__exit__()
            raise RuntimeError(f"serve did not start: {self.output()}")
        return self

    def _up(self) -> bool:
        try:
            return httpx.get(f"{self.url}/health", timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    def __exit__(self, *exc: Any) -> None:
        assert self.proc is not None
        stop_process(self.proc, 30)
        self._output = self.proc.stdout.read() if self.proc.stdout else ""

    def output(self) -> str:
        return self._output


def run_serve(args: list[str], env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run serve to completion (for options it must refuse before it loads a model; the timeout only
    bounds a hang: importing torch alone takes ~20 s on a loaded 2-core host)."""
    cmd = [sys.executable, "-m", "haltwise.cli", "serve", "--tiny", "--port", str(free_port()), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})
