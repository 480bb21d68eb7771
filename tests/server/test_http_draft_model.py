"""A server with a draft model (tiny models): usage reports the request's drafts, /metrics the draft model's
share of all drafts apart."""
from __future__ import annotations

import httpx

from haltwise.config import EngineConfig
from haltwise.engine.async_engine import AsyncEngine
from haltwise.server.app import build_app
from tests.server.http_helpers import ServerThread, metric


def completion(url: str, prompt: str, **sampling) -> dict:
    return httpx.post(f"{url}/v1/completions", json={
        "model": "tiny", "prompt": prompt, "max_tokens": 24, "temperature": 0,
        "repetition_detection": {"enabled": False}, **sampling}, timeout=60).json()


def test_usage_and_metrics_report_the_draft_models_acceptance():
    engine = AsyncEngine.build(engine_config=EngineConfig(dtype="auto", kv_cache_memory=8 * 2**20, max_model_len=256,
                                                          draft_model="tiny:1:2", speculative_tokens=2), tiny=True)
    with ServerThread(build_app(engine, "tiny")) as server:
        model = completion(server.url, "Hello world, hello world", temperature=0.8,
                           seed=1)["usage"]["speculation"]
        assert model["drafted"] > model["accepted"] > 0
        engine.engine.speculator.use_draft = False       # prompt lookup drafts the next one
        lookup = completion(server.url, "1, 2, 3, 4, 1, 2, 3, 4, 1, 2,")["usage"]["speculation"]
        assert lookup["drafted"] > 0
        assert metric(server.url, "haltwise_spec_draft_model_draft_tokens_total") == model["drafted"]
        assert metric(server.url, "haltwise_spec_draft_model_accepted_tokens_total") == model["accepted"]
        assert metric(server.url, "haltwise_spec_draft_tokens_total") == model["drafted"] + lookup["drafted"]
        assert metric(server.url, "haltwise_spec_accepted_tokens_total") == model["accepted"] + lookup["accepted"]
