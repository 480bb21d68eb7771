"""A server with a draft model (tiny models): usage reports the request's drafts, /metrics the draft model's."""
from __future__ import annotations

import httpx

from haltwise.config import EngineConfig
from haltwise.engine.async_engine import AsyncEngine
from haltwise.server.app import build_app
from tests.server.http_helpers import ServerThread, metric


def test_usage_and_metrics_report_the_draft_models_acceptance():
    engine = AsyncEngine.build(engine_config=EngineConfig(dtype="auto", kv_cache_memory=8 * 2**20, max_model_len=256,
                                                          draft_model="tiny:0:1", speculative_tokens=0), tiny=True)
    with ServerThread(build_app(engine, "tiny")) as server:
        body = httpx.post(f"{server.url}/v1/completions", json={
            "model": "tiny", "prompt": "Hello world, hello world", "max_tokens": 24, "temperature": 0,
            "repetition_detection": {"enabled": False}}, timeout=60).json()
        spec = body["usage"]["speculation"]
        assert spec["drafted"] >= spec["accepted"] > 0
        assert metric(server.url, "haltwise_spec_draft_model_draft_tokens_total") == spec["drafted"]
        assert metric(server.url, "haltwise_spec_draft_model_accepted_tokens_total") == spec["accepted"]
        assert metric(server.url, "haltwise_spec_draft_tokens_total") == spec["drafted"]
