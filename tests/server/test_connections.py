"""Issue 27: slow and idle connections are closed within the documented timeouts (server/connections.py),
and /health keeps answering meanwhile. Against `haltwise serve --tiny` as a real subprocess."""
from __future__ import annotations

import socket
import threading
import time
from typing import Iterator

import httpx
import pytest

from tests.server.http_helpers import wait_until
from tests.server.serve_process import ServeProcess

HEADER_TIMEOUT, BODY_TIMEOUT, KEEP_ALIVE = 2.0, 2.0, 1.0
MARGIN = 1.5   # scheduling slack on a busy 2-core host; the timeouts themselves are the bound under test
PARTIAL = [b"", b"GET /hea", b"POST /v1/completions HTTP/1.1\r\n", b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: "]


@pytest.fixture(scope="module")
def server() -> Iterator[ServeProcess]:
    with ServeProcess(["--header-timeout", str(HEADER_TIMEOUT), "--body-timeout", str(BODY_TIMEOUT),
                       "--keep-alive-timeout", str(KEEP_ALIVE), "--max-connections", "60"]) as s:
        yield s


def _closed_after(sock: socket.socket, start: float, limit: float) -> float | None:
    """Seconds from `start` until the server closed `sock` (EOF or reset), None if still open at `limit`."""
    sock.settimeout(0.1)
    while time.monotonic() - start < limit:
        try:
            if sock.recv(4096) == b"":
                return time.monotonic() - start
        except socket.timeout:
            continue
        except OSError:
            return time.monotonic() - start
    return None


def test_50_half_open_connections_are_closed_within_the_header_timeout_while_health_answers(server) -> None:
    socks, opened = [], []
    for i in range(50):
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        if PARTIAL[i % len(PARTIAL)]:
            sock.sendall(PARTIAL[i % len(PARTIAL)])
        socks.append(sock)
        opened.append(time.monotonic())
    health: list[float] = []
    stop = threading.Event()

    def probe() -> None:
        while not stop.is_set():
            t0 = time.monotonic()
            r = httpx.get(f"{server.url}/health", timeout=5)   # a fresh connection each time
            health.append(time.monotonic() - t0 if r.status_code == 200 else float("inf"))
            time.sleep(0.1)

    prober = threading.Thread(target=probe)
    prober.start()
    try:
        closed = [_closed_after(s, t, HEADER_TIMEOUT + MARGIN) for s, t in zip(socks, opened)]
    finally:
        stop.set()
        prober.join()
        for s in socks:
            s.close()
    assert all(c is not None for c in closed), f"{closed.count(None)} of 50 still open after the header timeout"
    assert min(closed) >= HEADER_TIMEOUT - 0.3, closed   # closed by the timer, not at once
    assert len(health) >= 5 and max(health) < 1.0, health
    print(f"\nhalf-open: closed after {min(closed):.2f}-{max(closed):.2f} s; /health max {max(health) * 1000:.0f} ms "
          f"over {len(health)} probes")


def test_a_partial_second_request_on_a_keep_alive_connection_is_closed(server) -> None:
    """uvicorn cancels its keep-alive timer on the first byte of the next request and arms nothing else."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert sock.recv(4096).startswith(b"HTTP/1.1 200")
        sock.sendall(b"GET /hea")
        start = time.monotonic()
        assert _closed_after(sock, start, HEADER_TIMEOUT + MARGIN) is not None


def test_an_idle_keep_alive_connection_is_closed(server) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert sock.recv(4096).startswith(b"HTTP/1.1 200")
        closed = _closed_after(sock, time.monotonic(), KEEP_ALIVE + MARGIN)
        assert closed is not None and closed >= KEEP_ALIVE - 0.3


def test_a_slow_body_gets_408_within_the_body_timeout(server) -> None:
    head = (b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: 100\r\n\r\n")
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(head + b'{"prompt": ')
        start, reply = time.monotonic(), b""
        sock.settimeout(BODY_TIMEOUT + MARGIN)
        while chunk := sock.recv(4096):
            reply += chunk
        elapsed = time.monotonic() - start
    assert reply.startswith(b"HTTP/1.1 408"), reply[:200]
    assert b'"code": "request_timeout"' in reply and b"connection: close" in reply.lower()
    assert BODY_TIMEOUT - 0.3 <= elapsed <= BODY_TIMEOUT + MARGIN, elapsed


def test_the_connection_cap_answers_503_beyond_it(server) -> None:
    idle = [socket.create_connection(("127.0.0.1", server.port), timeout=10) for _ in range(60)]
    try:
        time.sleep(0.2)
        assert httpx.get(f"{server.url}/health", timeout=5).status_code == 503
    finally:
        for s in idle:
            s.close()
    assert wait_until(lambda: httpx.get(f"{server.url}/health", timeout=5).status_code == 200, 10)


def test_beyond_the_connection_cap_the_503_is_openai_json_with_retry_after() -> None:
    """The cap's answer comes from connections.HeadTimeoutH11 (uvicorn's own is plain text), in-process
    around a trivial app: the answer does not depend on the app behind the cap."""
    import uvicorn

    from haltwise.server.connections import ConnectionLimits, uvicorn_config

    async def app(scope, receive, send) -> None:
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"ok"})

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn_config(app, "127.0.0.1", port, ConnectionLimits(limit_concurrency=4),
                                           log_level="error", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        assert wait_until(lambda: server.started, 30)
        assert httpx.get(f"http://127.0.0.1:{port}/", timeout=5).status_code == 200
        idle = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(4)]
        time.sleep(0.2)
        r = httpx.get(f"http://127.0.0.1:{port}/", timeout=5)
        for s in idle:
            s.close()
        assert r.status_code == 503 and r.headers["retry-after"] == "1", (r.status_code, r.text)
        assert r.headers["content-type"] == "application/json", r.headers
        assert r.json()["error"]["code"] == "server_overloaded" and "--max-connections" in r.json()["error"]["message"]
        assert wait_until(lambda: httpx.get(f"http://127.0.0.1:{port}/", timeout=5).status_code == 200, 10)
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()
