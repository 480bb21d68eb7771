"""build_engine: the default path builds for any window, however short."""
from __future__ import annotations

from haltwise.config import EngineConfig
from haltwise.engine.factory import CALIBRATION_TOKENS, build_engine


def test_a_window_shorter_than_the_calibration_text_still_plans_and_verifies(monkeypatch):
    """The plan's calibration prefill is cut to the window (it ran past the rope tables: IndexError)."""
    monkeypatch.setenv("HALTWISE_PLAN_CACHE", "0")
    window = CALIBRATION_TOKENS // 2
    engine = build_engine(engine_config=EngineConfig(dtype="auto", max_model_len=window,
                                                     kv_cache_memory=4 * 2**20), tiny=True)
    assert engine.max_model_len == window and engine.kernel_plan.verified.checked > 0
