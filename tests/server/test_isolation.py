"""Issue 27: one request's admission cannot stall the requests already running.

The engine builds one stopper (with its stop-string automaton) per sequence when it admits a request,
on the engine thread, between steps. n=64 x 8 prompts with 64 stop strings of 256 characters used to
build 512 automatons there (~100 ms each on a loaded 2-core host: close to a minute without a step, so
every running stream froze). They now share one (stopping/stop_strings.py). The caps are raised here so
that the issue's exact request is admitted (the default caps refuse 512 sequences).

Not covered: a *new* one-token request still waits behind the 512 queued sequences (the scheduler is
first come, first served), see the report on issue 27.
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
from tests.server.http_helpers import ServerThread


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
