"""PlannedLinear: the plan's format per bucket, bias added, refusing formats skipped, float32 last."""
import torch
import torch.nn.functional as F

from haltwise.kernels.formats import LinearSource, get
from haltwise.kernels.plan import BUCKETS
from haltwise.kernels.planned_linear import PlannedLinear, apply_plan, linear_sources
from haltwise.kernels.host import probe
from haltwise.kernels.plan import measure_plan
from haltwise.models.tiny import tiny_llama
from tests.kernels.broken_formats import Raises
from tests.kernels.conftest import dense_weight, grid_weight

FORMATS = {f.name: f for f in (get("float32"), get("int8-wo"), get("int4-wo"), Raises())}


def test_each_bucket_runs_its_format_and_adds_the_bias():
    weight, bias = grid_weight(), torch.randn(96)
    rankings = [["int4-wo"]] * 3 + [["int8-wo"]] * 4 + [["float32"]]
    layer = PlannedLinear(LinearSource("l", weight, bias), rankings, FORMATS)
    assert layer.bucket_formats == ["int4-wo"] * 3 + ["int8-wo"] * 4 + ["float32"]
    for rows in (1, 3, 4, 5, 64, 65, 300):
        x = torch.randn(rows, 64)
        ref = F.linear(x, weight, bias)
        rel = ((layer(x) - ref).abs().max() / ref.abs().max()).item()
        assert rel < 0.05, (rows, rel)
    assert torch.equal(layer(torch.randn(300, 64)[:0]), torch.zeros(0, 96))
    assert layer(torch.randn(2, 3, 64)).shape == (2, 3, 96)


def test_a_format_that_refuses_the_weight_hands_over_to_the_next():
    rankings = [["test-raises", "int4-wo", "float32"]] * len(BUCKETS)
    layer = PlannedLinear(LinearSource("l", dense_weight()), rankings, FORMATS)   # not on a grid: int4 refuses
    assert layer.bucket_formats == ["float32"] * len(BUCKETS)


def test_apply_plan_swaps_every_linear_and_keeps_the_outputs():
    model = tiny_llama(300)
    x = torch.randn(5, 64)
    before = {name: mod(x if mod.in_features == 64 else torch.randn(5, mod.in_features))
              for name, mod in model.named_modules() if isinstance(mod, torch.nn.Linear) and mod.in_features == 64}
    sources = list(linear_sources(model))
    plan = measure_plan([s for _, _, s in sources], [get("float32")], probe())
    counts = apply_plan(model, plan, {"float32": get("float32")}, sources)
    assert counts == {"float32": len(sources)}
    assert not any(isinstance(m, torch.nn.Linear) for m in model.modules())
    for name, y in before.items():
        assert torch.equal(model.get_submodule(name)(x), y)
