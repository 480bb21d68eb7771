"""Fixtures for the resilience tests: a real server (tiny random model) with faults injected at build time."""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

import httpx
import pytest

from haltwise.config import EngineConfig
from haltwise.engine.faults import ENV_VAR
from haltwise.server.app import build_app
from tests.server.http_helpers import ServerThread, metric, wait_until

# Greedy, loop detector off and eos ignored: a random tiny model then runs exactly max_tokens steps,
# so the 1-based step numbers of HALTWISE_FAULTS land on known requests.
PLAIN = {"model": "tiny", "temperature": 0.0, "ignore_eos": True, "repetition_detection": {"enabled": False}}


@contextlib.contextmanager
def fault_server(monkeypatch: pytest.MonkeyPatch, faults: str, *, kv_cache_memory: int = 8 * 2**20,
                 max_queue: int = 256, watermark: float = 0.9, max_model_len: int = 256,
                 **build: Any) -> Iterator[ServerThread]:
    """A tiny-model server whose model runner applies `faults` (HALTWISE_FAULTS syntax; "" = none)."""
    from haltwise.engine.async_engine import AsyncEngine

    with monkeypatch.context() as m:
        if faults:
            m.setenv(ENV_VAR, faults)
        else:
            m.delenv(ENV_VAR, raising=False)
        config = EngineConfig(kv_cache_memory=kv_cache_memory, max_model_len=max_model_len, max_queue=max_queue,
                              watermark=watermark)
        engine = AsyncEngine.build(engine_config=config, tiny=True, **build)
    with ServerThread(build_app(engine, "tiny")) as server:
        yield server


def assert_idle(url: str) -> None:
    """After a scenario: no running or waiting request, every KV block free (allocator all-free)."""
    def idle() -> bool:
        return (metric(url, "haltwise_requests_running") == 0 and metric(url, "haltwise_requests_waiting") == 0
                and metric(url, "haltwise_kv_blocks_used") == 0)

    assert wait_until(idle, 60), httpx.get(f"{url}/metrics").text
    assert metric(url, "haltwise_kv_blocks_free") == metric(url, "haltwise_kv_blocks_total") > 0


def complete(url: str, prompt: str = "hello world", max_tokens: int = 4, **extra: Any) -> httpx.Response:
    return httpx.post(f"{url}/v1/completions", json={**PLAIN, "prompt": prompt, "max_tokens": max_tokens, **extra},
                      timeout=120)
