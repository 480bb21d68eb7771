"""A model's progress counter (LlamaModel.progress), the watchdog's evidence that a step computes: it moves
once per layer on the Python path, twice per layer (attention, layer end) in the native stack."""
import pytest

from haltwise.config import EngineConfig
from haltwise.engine.factory import build_engine
from haltwise.sampling_params import SamplingParams


@pytest.mark.parametrize(("dtype", "beats_per_layer"), [("float32", 1), ("auto", 2)])
def test_progress_moves_per_layer_on_both_paths(dtype: str, beats_per_layer: int) -> None:
    engine = build_engine(engine_config=EngineConfig(dtype=dtype, kv_cache_memory=8 * 2**20), tiny=True)
    model = engine.runner.model.model
    assert (model.native_decode is not None) == (dtype == "auto")
    engine.add_request("r", [11, 12, 13, 14], SamplingParams(temperature=0.0, max_tokens=3, ignore_eos=True))
    steps, before = 0, engine.runner.progress()
    while engine.has_unfinished():
        engine.step()
        steps += 1
    assert engine.runner.progress() - before == steps * beats_per_layer * len(model.layers)
