"""--max-concurrent-per-client (server/client_limit.py): over the limit, 429 OpenAI-shaped with Retry-After
at once; another client (another address) is not limited; a finished request frees its slot."""
from __future__ import annotations

import threading

import httpx

from haltwise.server.app import build_app
from tests.server.http_helpers import ServerThread, tiny_engine, wait_until

LONG = {"prompt": "once", "max_tokens": 200, "ignore_eos": True, "stream": True, "timeout": 300}


def test_a_client_over_its_limit_gets_429_while_another_client_is_served() -> None:
    app = build_app(tiny_engine(), "tiny", ui=False, max_concurrent_per_client=1)
    with ServerThread(app) as server:
        first_event = threading.Event()
        release = threading.Event()

        def hold_a_stream() -> None:
            with httpx.stream("POST", server.url + "/v1/completions", json=LONG, timeout=300) as r:
                for line in r.iter_lines():
                    first_event.set()
                    if release.is_set():
                        return

        holder = threading.Thread(target=hold_a_stream)
        holder.start()
        try:
            assert first_event.wait(120)
            same = httpx.post(server.url + "/v1/completions", json={"prompt": "hi", "max_tokens": 1}, timeout=60)
            other_address = httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.2"), timeout=60)
            other = other_address.post(server.url + "/v1/completions", json={"prompt": "hi", "max_tokens": 1})
            health = httpx.get(server.url + "/health", timeout=10)
        finally:
            release.set()
            holder.join(120)
        assert same.status_code == 429 and same.headers["retry-after"] == "1", same.text
        body = same.json()["error"]
        assert body["code"] == "rate_limit_exceeded" and "--max-concurrent-per-client" in body["message"]
        assert other.status_code == 200 and health.status_code == 200
        assert wait_until(lambda: httpx.post(server.url + "/v1/completions", timeout=60,
                                             json={"prompt": "hi", "max_tokens": 1}).status_code == 200, 60)


def test_with_an_api_key_the_client_is_the_key() -> None:
    from haltwise.server.client_limit import client_of

    def scope(addr: str, key: bytes) -> dict:
        return {"client": (addr, 1), "headers": [(b"authorization", b"Bearer " + key)]}

    assert client_of(scope("10.0.0.1", b"k1"), keyed=True) == client_of(scope("10.0.0.2", b"k1"), keyed=True)
    assert client_of(scope("10.0.0.1", b"k1"), keyed=True) != client_of(scope("10.0.0.1", b"k2"), keyed=True)
    assert client_of(scope("10.0.0.1", b"k1"), keyed=False) != client_of(scope("10.0.0.2", b"k1"), keyed=False)
    assert "k1" not in client_of(scope("10.0.0.1", b"k1"), keyed=True)
