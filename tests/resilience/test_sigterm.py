"""SIGTERM on `haltwise serve --tiny` with a stream in flight: the stream runs to its end, every new
request sent while it drains gets a 503 with Retry-After (the listener stays open during the drain),
and the process exits 0."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys

import httpx

from haltwise.engine.faults import ENV_VAR
from tests.resilience.conftest import PLAIN
from tests.server.http_helpers import wait_until

# Every model step after the first sleeps 20 ms, so the 300-token stream runs for at least 6 s: far longer
# than three requests on a fresh connection take. Were it over first, the drain would end and the
# listener close, and the test would fail with a refused connection, not pass.
SLOW_STEPS = "stall@2-1000:0.02"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _up(url: str) -> bool:
    try:
        return httpx.get(f"{url}/ready", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def _assert_refused_while_draining(url: str) -> None:
    """A new generation request (a fresh connection each) during the drain: 503 + Retry-After, OpenAI shape."""
    r = httpx.post(f"{url}/v1/completions", json={**PLAIN, "prompt": "hi", "max_tokens": 2}, timeout=30)
    assert r.status_code == 503 and float(r.headers["retry-after"]) > 0, r
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and "shutting down" in error["message"]
    assert httpx.get(f"{url}/ready", timeout=30).status_code == 503


def test_sigterm_drains_stream_refuses_new_requests_with_503_and_exits_zero() -> None:
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([sys.executable, "-m", "haltwise.cli", "serve", "--tiny", "--port", str(port),
                             "--served-model-name", "tiny", "--shutdown-grace", "120", "--threads", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, ENV_VAR: SLOW_STEPS})
    try:
        assert wait_until(lambda: proc.poll() is None and _up(url), 120), proc.poll()
        body = {**PLAIN, "prompt": "once upon a time", "max_tokens": 300, "stream": True}
        events = []
        with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=120) as r:
            assert r.status_code == 200
            for line in r.iter_lines():
                if not line.startswith("data: "):
                    continue
                data = line[len("data: "):]
                events.append(data if data == "[DONE]" else json.loads(data))
                if len(events) == 1:
                    proc.send_signal(signal.SIGTERM)
                    for _ in range(3):   # the stream is still running (SLOW_STEPS): the listener is open
                        _assert_refused_while_draining(url)
        assert events[-1] == "[DONE]", events[-3:]
        assert events[-2]["choices"][0]["finish_reason"] == "length"    # drained to its end, not cut
        assert proc.wait(timeout=120) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        output = proc.stdout.read() if proc.stdout else ""
    assert "Traceback" not in output, output
