"""SIGTERM on `haltwise serve --tiny` with a stream in flight: the stream completes or ends cleanly
(an error event then [DONE]), new requests are refused while draining, and the process exits 0."""
from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys

import httpx

from tests.resilience.conftest import PLAIN
from tests.server.http_helpers import wait_until


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _up(url: str) -> bool:
    try:
        return httpx.get(f"{url}/ready", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def _new_request_while_draining(url: str) -> httpx.Response | None:
    """A new generation request sent after SIGTERM, while the stream above is still draining.

    Refused either way: a 503 with Retry-After (the app's draining flag, set first) or, once uvicorn
    has closed its listener (within ~0.1 s of the signal), no connection at all (None). Never served.
    """
    try:
        return httpx.post(f"{url}/v1/completions", json={**PLAIN, "prompt": "hi", "max_tokens": 2}, timeout=30)
    except httpx.ConnectError:
        return None


def test_sigterm_drains_stream_and_exits_zero() -> None:
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([sys.executable, "-m", "haltwise.cli", "serve", "--tiny", "--port", str(port),
                             "--served-model-name", "tiny", "--shutdown-grace", "20", "--threads", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert wait_until(lambda: proc.poll() is None and _up(url), 120), proc.poll()
        body = {**PLAIN, "prompt": "once upon a time", "max_tokens": 400, "stream": True}
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
                    refused = _new_request_while_draining(url)
        assert events[-1] == "[DONE]", events[-3:]
        last = events[-2]
        if "error" in last:  # cut by the shutdown: said so, in the OpenAI shape
            assert set(last["error"]) == {"message", "type", "param", "code"}
        else:
            assert last["choices"][0]["finish_reason"] == "length"
        if refused is not None:
            assert refused.status_code == 503 and "retry-after" in refused.headers, refused
            assert set(refused.json()["error"]) == {"message", "type", "param", "code"}
        assert proc.wait(timeout=120) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        output = proc.stdout.read() if proc.stdout else ""
    assert "Traceback" not in output, output
