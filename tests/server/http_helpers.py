"""Helpers for the HTTP tests: the app on uvicorn in a thread on a free loopback port; /metrics reads; SSE."""
from __future__ import annotations

import json
import re
import socket
import threading
import time
from typing import Any

import httpx
import uvicorn

from haltwise.config import EngineConfig


class ServerThread:
    """uvicorn serving `app` from a background thread; `url` is its base URL."""

    def __init__(self, app: Any):
        self.app = app
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", http="h11"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self) -> "ServerThread":
        self.thread.start()
        deadline = time.monotonic() + 120
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.should_exit = True
        self.thread.join(30)
        self.sock.close()


def metric(url: str, name: str, **labels: str) -> float:
    """One sample of /metrics (0 when absent)."""
    text = httpx.get(f"{url}/metrics").text
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        m = re.match(r"^([a-zA-Z0-9_:]+)(?:\{(.*)\})? (\S+)$", line)
        if m and m.group(1) == name:
            got = ",".join(sorted((m.group(2) or "").split(","))) if m.group(2) else ""
            if got == want:
                return float(m.group(3))
    return 0.0


def wait_until(check: Any, limit: float = 30.0) -> bool:
    """Poll `check()` until true (a bound for a hang, not a timing assertion)."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return check()


def tiny_engine() -> Any:
    from haltwise.engine.async_engine import AsyncEngine

    return AsyncEngine.build(engine_config=EngineConfig(kv_cache_memory=8 * 2**20, max_model_len=256), tiny=True)


def sse_events(response: httpx.Response) -> list[Any]:
    """Decoded `data:` events of an SSE response; the literal "[DONE]" stays a string."""
    out: list[Any] = []
    for line in response.iter_lines():
        if line.startswith("data: "):
            data = line[len("data: "):]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out
