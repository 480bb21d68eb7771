"""Engine level: dtype auto runs the plan; a broken candidate is excluded and the engine still matches float32."""
import copy

import pytest
import torch

from haltwise.config import EngineConfig
from haltwise.engine.factory import build_engine
from haltwise.kernels import model_plan
from haltwise.kernels.formats import get
from haltwise.kernels.planned_linear import PlannedLinear
from haltwise.sampling_params import SamplingParams
from tests.kernels.broken_formats import BROKEN


def greedy_tokens(engine, prompt, n=12):
    params = SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True)
    engine.add_request("r", prompt, params)
    out = None
    while engine.has_unfinished():
        for update in engine.step():
            out = update
    return out.outputs[0].token_ids


def tiny(dtype, **kw):
    return build_engine(engine_config=EngineConfig(dtype=dtype, kv_cache_memory=4 * 2**20, **kw), tiny=True)


@pytest.mark.parametrize("invariant", [False, True], ids=["per-bucket plan", "batch-invariant plan"])
def test_broken_candidates_are_excluded_and_the_engine_matches_float32(monkeypatch, invariant):
    broken = [copy.copy(f) for f in BROKEN]
    for f in broken:
        f.batch_invariant = invariant                   # the invariant plan measures only formats that claim it
    good = get("float32-native" if invariant else "float32")
    monkeypatch.setattr(model_plan, "all_formats", lambda: [*broken, good])
    auto = tiny("auto", batch_invariant=invariant)
    plan = auto.kernel_plan
    for group in plan.groups.values():
        assert set(group.excluded) == {f.name for f in broken}
    assert {name for names in plan.chosen().values() for name in names} == {good.name}
    layers = [m for m in auto.runner.model.modules() if isinstance(m, PlannedLinear)]
    assert layers and all(set(m.bucket_formats) == {good.name} for m in layers)
    prompt = list(range(5, 40))
    assert greedy_tokens(auto, prompt) == greedy_tokens(tiny("float32"), prompt)
    assert "kernel plan" in auto.describe() and "KV cache" in auto.describe()


def test_auto_with_every_registered_format_stays_close_to_float32():
    auto, exact = tiny("auto"), tiny("float32")
    assert any(isinstance(m, PlannedLinear) for m in auto.runner.model.modules())
    assert not any(isinstance(m, PlannedLinear) for m in exact.runner.model.modules())
    assert auto.runner.kv_caches[0][0].dtype == torch.int8          # --kv-cache-dtype auto under dtype auto
    assert exact.runner.kv_caches[0][0].dtype == torch.float32      # the float32 oracle keeps float32 KV
    ids = torch.arange(3, 30)
    a, b = auto.runner.model.model.embed_tokens(ids), exact.runner.model.model.embed_tokens(ids)
    assert torch.equal(a, b)
    layer_a, layer_b = auto.runner.model.model.layers[0].mlp, exact.runner.model.model.layers[0].mlp
    ya, yb = layer_a(a), layer_b(b)
    assert ((ya - yb).abs().max() / yb.abs().max()).item() < 0.05


def test_bfloat16_is_refused_where_the_host_cannot_run_it(monkeypatch):
    from haltwise.engine import factory

    monkeypatch.setattr(factory, "bf16_unavailable", lambda: "RuntimeError: no bf16 kernels (simulated)")
    with pytest.raises(ValueError, match="bfloat16 cannot run on this CPU .*simulated.*--dtype auto"):
        tiny("bfloat16")
