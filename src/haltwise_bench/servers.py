"""Start an HTTP inference server as a subprocess, wait until it answers, and stop it cleanly.

    with ServerProcess(haltwise_server_cmd(port), port, "haltwise") as server:
        ... server.base_url ...

The server's stdout and stderr go to a temporary log file whose tail is quoted when it fails to
start (the file is then kept; after a clean stop it is removed). Stopping sends SIGTERM, waits,
then SIGKILL: only the process this object started.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def haltwise_server_cmd(port: int, dtype: str = "auto", tiny: bool = False, model: str | None = None,
                        extra: tuple[str, ...] = ()) -> list[str]:
    """`haltwise serve`, as users start it (the CLI: `python -m haltwise.cli serve`); ready at /ready."""
    cmd = [sys.executable, "-m", "haltwise.cli", "serve", "--host", "127.0.0.1", "--port", str(port), "--dtype", dtype]
    if tiny:
        cmd.append("--tiny")
    if model:
        cmd += ["--model", model]
    return cmd + list(extra)


READY_POLL_S = 0.05     # ready_s is late by at most this much


class ServerProcess:
    """A server subprocess; ready when GET ready_path answers 200."""

    def __init__(self, cmd: list[str], port: int, name: str, ready_path: str = "/v1/models",
                 start_timeout_s: float = 300.0, env: dict[str, str] | None = None,
                 cpus: frozenset[int] | None = None) -> None:
        self.cmd, self.port, self.name = cmd, port, name
        self.cpus = cpus        # the CPUs the server (and every thread it starts) may run on; None: inherited
        self.env = env          # variables set for the server on top of this process's environment
        self.ready_path = ready_path
        self.start_timeout_s = start_timeout_s
        self.base_url = f"http://127.0.0.1:{port}"
        self._proc: subprocess.Popen | None = None
        self._log = tempfile.NamedTemporaryFile(prefix=f"bench-{name}-", suffix=".log", delete=False)
        self._keep_log = False  # set when the server failed: its log is the evidence
        self.ready_s: float | None = None   # start() -> first 200 from ready_path (load time)

    def __enter__(self) -> "ServerProcess":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        started = time.monotonic()
        env = {**os.environ, **self.env} if self.env else None
        cpus = self.cpus
        pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None   # in the child, before exec: inherited
        self._proc = subprocess.Popen(self.cmd, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                      env=env, preexec_fn=pin)
        deadline = started + self.start_timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                self._keep_log = True
                raise RuntimeError(f"{self.name} server exited with {self._proc.returncode} (log: {self._log.name}):\n"
                                   f"{self.log_tail()}")
            try:
                if httpx.get(self.base_url + self.ready_path, timeout=2.0).status_code == 200:
                    self.ready_s = time.monotonic() - started
                    return
            except httpx.HTTPError:
                pass
            time.sleep(READY_POLL_S)
        self._keep_log = True
        tail = self.log_tail()
        self.stop()
        raise RuntimeError(f"{self.name} server not ready after {self.start_timeout_s:.0f}s (log: {self._log.name}):\n"
                           f"{tail}")

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        self._log.close()
        if not self._keep_log:
            Path(self._log.name).unlink(missing_ok=True)

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    def peak_rss_mib(self) -> float | None:
        """The running server's peak resident set (Linux VmHWM), MiB; None where it cannot be read."""
        if self._proc is None:
            return None
        try:
            status = Path(f"/proc/{self._proc.pid}/status").read_text()
        except OSError:
            return None
        kib = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:")), None)
        return None if kib is None else round(kib / 1024, 1)

    def log_tail(self, chars: int = 3000) -> str:
        if not self._log.closed:
            self._log.flush()
        return Path(self._log.name).read_text(encoding="utf-8", errors="replace")[-chars:]
