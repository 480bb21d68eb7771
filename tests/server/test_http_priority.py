"""vLLM's `priority` through the official openai client: a 400 under the default fcfs policy (unless 0), and
under --scheduling-policy priority an urgent request finishes before low-priority ones queued ahead of it."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Iterator

import httpx
import openai
import pytest

from haltwise.config import EngineConfig
from haltwise.server.app import build_app
from tests.server.http_helpers import ServerThread, metric, wait_until


def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)


@pytest.fixture(scope="module")
def priority_server() -> Iterator[ServerThread]:
    from haltwise.engine.async_engine import AsyncEngine

    config = EngineConfig(kv_cache_memory=8 * 2**20, max_model_len=256, max_num_seqs=1, speculative_tokens=0,
                          scheduling_policy="priority")
    with ServerThread(build_app(AsyncEngine.build(engine_config=config, tiny=True), "tiny")) as server:
        yield server


def test_fcfs_accepts_priority_0_and_refuses_any_other(tiny_server) -> None:
    c = client(tiny_server)
    assert c.completions.create(model="tiny", prompt="hi", max_tokens=2, extra_body={"priority": 0}).choices
    for path, body in (("/v1/completions", {"prompt": "hi", "max_tokens": 2, "priority": -3}),
                       ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2,
                                                 "priority": 4})):
        r = httpx.post(tiny_server.url + path, json=body, timeout=30)
        assert r.status_code == 400 and r.json()["error"]["param"] == "priority"
        assert "--scheduling-policy priority" in r.json()["error"]["message"]


def test_an_urgent_request_overtakes_a_saturated_low_priority_queue(priority_server) -> None:
    c = client(priority_server)
    finished: list[str] = []

    def ask(name: str, priority: int, max_tokens: int) -> None:
        c.completions.create(model="tiny", prompt=f"{name} go", max_tokens=max_tokens, temperature=0,
                             extra_body={"priority": priority, "ignore_eos": True,
                                         "repetition_detection": {"enabled": False}})
        finished.append(name)

    with ThreadPoolExecutor(4) as pool:
        lows = [pool.submit(ask, f"low{i}", 5, 120) for i in range(3)]
        assert wait_until(lambda: metric(priority_server.url, "haltwise_requests_waiting") >= 2)
        urgent = pool.submit(ask, "urgent", -1, 4)
        urgent.result()
        for f in lows:
            f.result()
    assert finished[0] == "urgent", finished
