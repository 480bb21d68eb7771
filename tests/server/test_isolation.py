"""Issue 27: one request's admission cannot stall the requests already running.

The engine builds one stopper (with its stop-string automaton) per sequence when it admits a request,
on the engine thread, between steps. n=64 x 8 prompts with 64 stop strings of 256 characters used to
build 512 automatons there (~100 ms each on a loaded 2-core host: close to a minute without a step, so
every running stream froze). They now share one (stopping/stop_strings.py), and are built off the engine
thread. The caps are raised here so that the issue's exact request is admitted (the default caps refuse
512 sequences).

A *new* one-token request from another client used to wait behind the 512 queued sequences (the scheduler
was first come, first served); sequences now start in turn across requests (engine/fairness.py).
"""
from __future__ import annotations

import json
import random
import string
import threading
import time

import httpx

from haltwise.config import EngineConfig
from haltwise.server.app import build_app
from tests.server.http_helpers import ServerThread, wait_until


def _big_request() -> dict:
    rng = random.Random(27)
    stops = ["".join(rng.choice(string.ascii_letters) for _ in range(256)) for _ in range(64)]
    return {"prompt": [f"prompt {i}" for i in range(8)], "n": 64, "stop": stops, "max_tokens": 2,
            "ignore_eos": True, "timeout": 600}


def test_a_running_stream_keeps_its_pace_while_a_512_sequence_request_is_admitted() -> None:
    from haltwise.engine.async_engine import AsyncEngine
    from haltwise.server.limits import RequestCaps

    config = EngineConfig(kv_cache_memory=32 * 2**20, max_model_len=512, max_queue=1024)
    engine = AsyncEngine.build(engine_config=config, tiny=True)
    app = build_app(engine, "tiny", caps=RequestCaps(max_sequences=512), ui=False)
    stream = {"prompt": "once", "max_tokens": 400, "ignore_eos": True, "stream": True, "timeout": 600}
    with ServerThread(app) as server:
        big: dict = {}
        sender = threading.Thread(target=lambda: big.setdefault(
            "response", httpx.post(server.url + "/v1/completions", json=_big_request(), timeout=900)))
        arrivals: list[float] = []
        with httpx.stream("POST", server.url + "/v1/completions", json=stream, timeout=900) as r:
            for line in r.iter_lines():
                if not line.startswith("data: {"):
                    continue
                arrivals.append(time.monotonic())
                if len(arrivals) == 5:
                    sender.start()          # admitted between two steps of this stream
                    sent = time.monotonic()
                if sender.is_alive() is False and len(arrivals) > 5 and "response" in big:
                    break
                assert json.loads(line[len("data: "):])["choices"] is not None
        sender.join(900)
    during = [b - a for a, b in zip(arrivals, arrivals[1:]) if b > sent]
    assert big["response"].status_code == 200 and len(big["response"].json()["choices"]) == 512
    # 5 s: far under the old stall (~50 s), above this loaded host's own noise (gaps up to ~3 s seen)
    assert during and max(during) < 5.0, f"the stream stalled {max(during):.1f} s during the admission"
    print(f"\nstream gaps while 512 sequences were admitted and ran: max {max(during):.2f} s over {len(during)}")


def test_a_one_token_request_from_another_client_is_answered_in_2s_while_512_sequences_run() -> None:
    """The issue's bound: < 2 s for the one-token request, /ready 200 throughout (isolation bounds are the
    one wall-clock assertion the issue asks for). The big request runs 400 tokens a sequence, so under first
    come, first served the small one waits for about 7 waves of 64 sequences x 400 steps."""
    from haltwise.engine.async_engine import AsyncEngine
    from haltwise.server.limits import RequestCaps

    config = EngineConfig(kv_cache_memory=32 * 2**20, max_model_len=512, max_queue=1024)
    engine = AsyncEngine.build(engine_config=config, tiny=True)
    app = build_app(engine, "tiny", caps=RequestCaps(max_sequences=512), ui=False)
    big_body = {**_big_request(), "max_tokens": 400, "stream": True}
    done = threading.Event()
    ready_codes: list[int] = []

    def big_client() -> None:   # streams until told to go; leaving aborts the rest (client gone)
        with httpx.stream("POST", server.url + "/v1/completions", json=big_body, timeout=900) as r:
            for _ in r.iter_lines():
                if done.is_set():
                    return

    def ready_poller() -> None:
        with httpx.Client(timeout=30) as client:
            while not done.is_set():
                ready_codes.append(client.get(server.url + "/ready").status_code)
                time.sleep(0.1)

    with ServerThread(app) as server:
        threads = [threading.Thread(target=big_client), threading.Thread(target=ready_poller)]
        for t in threads:
            t.start()
        try:
            assert wait_until(lambda: engine.stats().num_waiting > 0, 300), "the big request never queued"
            with httpx.Client(timeout=120) as other:
                started = time.monotonic()
                r = other.post(server.url + "/v1/completions", json={"prompt": "hi", "max_tokens": 1})
                elapsed = time.monotonic() - started
            waiting = engine.stats().num_waiting
        finally:
            done.set()
            for t in threads:
                t.join(120)
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 1
    assert waiting > 0, "the big request had drained: the bound was not measured under its load"
    assert elapsed < 2.0, f"the one-token request took {elapsed:.2f} s behind the 512-sequence request"
    assert ready_codes and set(ready_codes) == {200}, f"/ready answered {sorted(set(ready_codes))}"
    print(f"\none-token request: {elapsed:.2f} s with {waiting} sequences still waiting; /ready x{len(ready_codes)} 200")


def test_the_queue_is_charged_n_x_prompts_before_any_prompt_starts() -> None:
    """3 prompts x n=4 = 12 sequences against a queue of 8: 503 with Retry-After at once, and no prompt
    was admitted (previously the first prompts were queued and ran before the third was refused)."""
    from haltwise.engine.async_engine import AsyncEngine
    from haltwise.server.limits import RequestCaps

    config = EngineConfig(kv_cache_memory=8 * 2**20, max_model_len=256, max_queue=8)
    engine = AsyncEngine.build(engine_config=config, tiny=True)
    admitted: list[str] = []
    admit = engine.engine.admit
    engine.engine.admit = lambda request: (admitted.append(request.request_id), admit(request))[1]
    app = build_app(engine, "tiny", caps=RequestCaps(max_sequences=64), ui=False)
    with ServerThread(app) as server:
        r = httpx.post(server.url + "/v1/completions", timeout=120,
                       json={"prompt": ["a", "b", "c"], "n": 4, "max_tokens": 4})
        ok = httpx.post(server.url + "/v1/completions", timeout=120,
                        json={"prompt": ["a", "b"], "n": 4, "max_tokens": 4})
    assert r.status_code == 503 and r.headers["retry-after"] == "1", r.text
    assert len(admitted) == 2, f"engine requests admitted: {admitted} (only the second request's 2 may be)"
    assert r.json()["error"]["code"] == "overloaded" and "n x prompts" in r.json()["error"]["message"]
    assert ok.status_code == 200 and len(ok.json()["choices"]) == 8


def test_chat_templates_render_off_the_event_loop_on_every_surface(monkeypatch) -> None:
    """A template render (unbounded in time for a large conversation) never runs on the event loop: the
    real chat_prompt is wrapped to record the thread it runs on, for chat, Messages (and its count_tokens),
    Responses and /tokenize."""
    import importlib

    from tests.server.http_helpers import tiny_engine

    threads: list[str] = []

    def recording(module):
        real = module.chat_prompt

        def chat_prompt(*args, **kwargs):
            threads.append(threading.current_thread().name)
            return real(*args, **kwargs)
        monkeypatch.setattr(module, "chat_prompt", chat_prompt)

    for name in ("api", "chat_prompt", "surfaces.anthropic_messages"):  # where it is looked up (answer_prompt: its own)
        recording(importlib.import_module(f"haltwise.server.{name}"))
    ask = [{"role": "user", "content": "Hello there"}]
    with ServerThread(build_app(tiny_engine(), "tiny", ui=False)) as server:
        loop_thread = server.thread.name
        for path, body in [("/v1/chat/completions", {"messages": ask, "max_tokens": 2}),
                           ("/v1/messages", {"model": "tiny", "messages": ask, "max_tokens": 2}),
                           ("/v1/messages/count_tokens", {"model": "tiny", "messages": ask}),
                           ("/v1/responses", {"model": "tiny", "input": "Hello there", "max_output_tokens": 2}),
                           ("/tokenize", {"messages": ask})]:
            r = httpx.post(server.url + path, json=body, timeout=120)
            assert r.status_code == 200, (path, r.text)
    assert len(threads) == 5 and loop_thread not in threads, (loop_thread, threads)
