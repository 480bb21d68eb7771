"""The registry through real HTTP (official openai client): listing with status, load on demand, one load
for concurrent first requests, LRU, in-flight protection, keep_alive, idle expiry, 404 on every surface,
reload with identical tokens. Tiny engines (tiny_models.py): every load and unload is the real one."""
from __future__ import annotations

import threading
import time

import httpx
import openai
import pytest

from haltwise.server.app import build_app
from tests.registry.tiny_models import build_long, build_tiny, tiny_registry
from tests.server.http_helpers import ServerThread, metric


def client(server: ServerThread) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="none", max_retries=0, timeout=60)


def status(server: ServerThread) -> dict[str, str]:
    return {r["id"]: r["status"]["value"] for r in httpx.get(f"{server.url}/v1/models").json()["data"]}


def complete(server: ServerThread, model: str, **extra) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/completions", timeout=60,
                      json={"model": model, "prompt": "hello", "max_tokens": 8, "temperature": 0, **extra})


def wait_until(check, seconds: float = 20.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return False


def test_listing_load_on_demand_lru_and_reload():
    with ServerThread(build_app(None, models=tiny_registry(["a", "b", "c"], max_loaded=2))) as s:
        oa = client(s)
        assert {m.id for m in oa.models.list().data} == {"a", "b", "c"}
        assert status(s) == {"a": "unloaded", "b": "unloaded", "c": "unloaded"}
        first = oa.completions.create(model="a", prompt="hello", max_tokens=8, temperature=0)
        row = next(r for r in httpx.get(f"{s.url}/v1/models").json()["data"] if r["id"] == "a")
        assert row["status"] == {"value": "loaded"} and row["kv_capacity"]["tokens"] > 0
        assert row["resident_bytes"] is not None
        oa.completions.create(model="b", prompt="hello", max_tokens=2)
        oa.completions.create(model="a", prompt="hello", max_tokens=2)        # a is now the most recent
        oa.completions.create(model="c", prompt="hello", max_tokens=2)        # evicts b, the LRU idle one
        assert status(s) == {"a": "loaded", "b": "unloaded", "c": "loaded"}
        assert metric(s.url, "haltwise_model_unloads_total", model="b", reason="lru") == 1
        oa.completions.create(model="b", prompt="hello", max_tokens=2)        # evicts a
        again = oa.completions.create(model="a", prompt="hello", max_tokens=8, temperature=0)
        assert again.choices[0].text == first.choices[0].text                 # unloaded + reloaded: same tokens
        seeded = [oa.completions.create(model="a", prompt="hi", max_tokens=8, temperature=1.0, seed=7)
                  .choices[0].text for _ in range(2)]
        assert seeded[0] == seeded[1]


def test_ten_concurrent_first_requests_load_once():
    with ServerThread(build_app(None, models=tiny_registry(["a", "b"]))) as s:
        codes: list[int] = []
        threads = [threading.Thread(target=lambda: codes.append(complete(s, "b").status_code)) for _ in range(10)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert codes == [200] * 10
        assert metric(s.url, "haltwise_model_loads_total", model="b") == 1


def test_a_streaming_model_is_never_evicted():
    with ServerThread(build_app(None, models=tiny_registry(["a", "b"], loader=build_long, max_loaded=1))) as s:
        oa = client(s)
        stream = oa.completions.create(model="a", prompt="hello", max_tokens=16000, stream=True,
                                       extra_body={"ignore_eos": True})
        chunks = iter(stream)
        next(chunks)                                                          # a's stream is in flight
        busy = complete(s, "b", timeout=0.3)
        assert busy.status_code == 503 and "retry-after" in busy.headers, busy.text
        assert status(s)["a"] == "loaded"
        for _, chunk in zip(range(20), chunks):                               # a's stream goes on meanwhile
            assert chunk.choices[0].finish_reason is None
        stream.close()                                                        # client gone: a's request ends
        assert complete(s, "b").status_code == 200                            # a idle now: evicted for b
        assert status(s) == {"a": "unloaded", "b": "loaded"}


def test_two_models_stream_at_once():
    with ServerThread(build_app(None, models=tiny_registry(["a", "b"]))) as s:
        oa = client(s)
        streams = [iter(oa.completions.create(model=m, prompt="hello", max_tokens=40, stream=True,
                                              extra_body={"ignore_eos": True})) for m in ("a", "b")]
        texts = ["", ""]
        for _ in range(40):
            for i, st in enumerate(streams):
                chunk = next(st, None)
                if chunk is not None:
                    texts[i] += chunk.choices[0].text
        assert all(texts) and status(s) == {"a": "loaded", "b": "loaded"}


def test_keep_alive_zero_and_idle_expiry():
    with ServerThread(build_app(None, models=tiny_registry(["a", "b"], keep_alive_s=0.5))) as s:
        assert complete(s, "a", keep_alive=-1).status_code == 200             # a: kept for ever
        assert complete(s, "b").status_code == 200                            # b: the server's 0.5 s
        assert wait_until(lambda: status(s)["b"] == "unloaded")
        assert metric(s.url, "haltwise_model_unloads_total", model="b", reason="idle") == 1
        time.sleep(1.0)
        assert status(s)["a"] == "loaded"
        assert complete(s, "a", keep_alive=0).status_code == 200              # unloaded right after
        assert wait_until(lambda: status(s)["a"] == "unloaded")
        assert metric(s.url, "haltwise_model_unloads_total", model="a", reason="request") == 1
        assert complete(s, "a", keep_alive="5 minutes").status_code == 400


def test_unknown_model_is_404_on_every_surface():
    with ServerThread(build_app(None, models=tiny_registry(["a"]))) as s:
        with pytest.raises(openai.NotFoundError) as e:
            client(s).chat.completions.create(model="nope", messages=[{"role": "user", "content": "hi"}])
        assert e.value.code == "model_not_found"
        assert complete(s, "nope").json()["error"]["code"] == "model_not_found"
        r = httpx.post(f"{s.url}/v1/messages", json={"model": "nope", "max_tokens": 4,
                                                      "messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 404 and r.json()["type"] == "error" and r.json()["error"]["type"] == "not_found_error"
        r = httpx.post(f"{s.url}/v1/responses", json={"model": "nope", "input": "hi"})
        assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
        assert status(s) == {"a": "unloaded"}


def test_load_and_unload_routes():
    with ServerThread(build_app(None, models=tiny_registry(["a", "b"]), api_key="k")) as s:
        assert httpx.post(f"{s.url}/models/load", json={"model": "b"}).status_code == 401
        auth = {"Authorization": "Bearer k"}
        r = httpx.post(f"{s.url}/models/load", json={"model": "b"}, headers=auth, timeout=60)
        assert r.status_code == 200 and r.json()["status"] == {"value": "loaded"}
        r = httpx.post(f"{s.url}/models/unload", json={"model": "b"}, headers=auth)
        assert r.status_code == 200 and r.json()["status"] == {"value": "unloaded"}
        assert httpx.post(f"{s.url}/models/load", json={"model": "x"}, headers=auth).status_code == 404


def test_a_failed_load_answers_every_waiter_and_can_be_retried():
    calls = []

    def flaky(path, estimate):
        calls.append(path)
        if len(calls) == 1:
            raise OSError("disk went away")
        return build_tiny(path, estimate)

    with ServerThread(build_app(None, models=tiny_registry(["a"], loader=flaky))) as s:
        r = complete(s, "a")
        assert r.status_code == 503 and r.json()["error"]["code"] == "engine_error" and "disk went away" in r.text
        assert status(s) == {"a": "unloaded"}
        assert complete(s, "a").status_code == 200
