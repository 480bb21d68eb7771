"""build_engine: the default path builds for any window, however short."""
from __future__ import annotations

import logging

import pytest

from haltwise.config import EngineConfig
from haltwise.engine.factory import CALIBRATION_TOKENS, build_engine


def test_a_window_shorter_than_the_calibration_text_still_plans_and_verifies(monkeypatch):
    """The plan's calibration prefill is cut to the window (it ran past the rope tables: IndexError)."""
    monkeypatch.setenv("HALTWISE_PLAN_CACHE", "0")
    window = CALIBRATION_TOKENS // 2
    engine = build_engine(engine_config=EngineConfig(dtype="auto", max_model_len=window,
                                                     kv_cache_memory=4 * 2**20), tiny=True)
    assert engine.max_model_len == window and engine.kernel_plan.verified.checked > 0


@pytest.mark.parametrize("arch,outtype", [("qwen3moe", "q8_0"), ("gpt-oss", "mxfp4")])
def test_an_moe_model_runs_every_step_natively_with_prompt_lookup_and_no_warning(caplog, arch, outtype):
    """qwen3moe, and gpt-oss as released (MXFP4 experts, attention sinks), under default flags: the native stack
    runs every step (its MoE block: csrc/moe_block.cpp), so the default path is batch invariant, prompt lookup
    is on, and no 'not batch invariant' warning is logged (before the stack ran each family, all three failed:
    the stack refused the model)."""
    from tests.models.converted import fixture

    with caplog.at_level(logging.INFO, logger="haltwise"):
        engine = build_engine(fixture(arch).gguf(outtype),
                              EngineConfig(dtype="auto", max_model_len=256, kv_cache_memory=8 * 2**20))
    assert "not batch invariant" not in caplog.text
    assert engine.model.model.native_decode is not None and engine.model.model.native_decode.every_step
    assert engine.speculator.num_tokens == EngineConfig().speculative_tokens > 0
