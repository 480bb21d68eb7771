"""build_engine: the default path builds for any window, however short; what it freezes holds no array garbage."""
from __future__ import annotations

import gc

import numpy as np
import torch

from haltwise.config import EngineConfig
from haltwise.engine.factory import CALIBRATION_TOKENS, build_engine


def test_a_window_shorter_than_the_calibration_text_still_plans_and_verifies(monkeypatch):
    """The plan's calibration prefill is cut to the window (it ran past the rope tables: IndexError)."""
    monkeypatch.setenv("HALTWISE_PLAN_CACHE", "0")
    window = CALIBRATION_TOKENS // 2
    engine = build_engine(engine_config=EngineConfig(dtype="auto", max_model_len=window,
                                                     kv_cache_memory=4 * 2**20), tiny=True)
    assert engine.max_model_len == window and engine.kernel_plan.verified.checked > 0


def test_the_garbage_frozen_with_the_engine_holds_no_tensor_or_array():
    """build_engine freezes what the start made without collecting first: a tensor or an array caught in a
    reference cycle would stay for the process's life."""
    build_engine(engine_config=EngineConfig(dtype="auto", kv_cache_memory=64 * 2**20))   # SmolLM2, default path
    gc.unfreeze()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        arrays = [type(o).__name__ for o in gc.garbage if isinstance(o, (torch.Tensor, np.ndarray))]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert arrays == []
