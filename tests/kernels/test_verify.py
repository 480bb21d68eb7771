"""The plan is verified where it runs: every linear, every row bucket, real activations, per-format bounds.

A format whose numbers leave its own error bound, or that claims batch invariance and breaks it, is
caught at engine build and the linear falls back to float32-native -- before any request runs.
"""

import pytest
import torch
import torch.nn.functional as F

from haltwise.config import EngineConfig
from haltwise.engine.factory import build_engine
from haltwise.kernels import model_plan, plan
from haltwise.kernels.formats import LinearFormat, LinearSource, float32_sum_bound, get
from haltwise.kernels.planned_linear import PlannedLinear
from haltwise.kernels.plan import BUCKETS
from haltwise.kernels.reference_rows import checked_rows
from haltwise.kernels.verify import verify_linear, verify_model
from tests.kernels.broken_formats import WrongInOneTileRow, WrongNumbers


class RowCountLeaks(LinearFormat):
    """Within float32 rounding of the truth, but a row's bits depend on how many rows share the call."""
    name, tolerance, batch_invariant = "test-row-count-leaks", 1e-5, True

    def prepare(self, source):
        return source.weight.float()

    def run(self, prepared, x):
        return F.linear(x, prepared) * (1 + 2.0 ** -23 * (x.shape[0] % 3))

    def error_bound(self, x, weight, abs_dot):
        return 4 * float32_sum_bound(weight, abs_dot)


def _layer(fmt, weight):
    return PlannedLinear(LinearSource("w", weight), [[fmt.name]] * len(BUCKETS), {fmt.name: fmt, "float32": get("float32")})


def _activations():
    x = torch.randn(40, 64, generator=torch.Generator().manual_seed(0))
    x[:, 7] *= 50                                           # an outlier channel
    return x


def test_a_correct_invariant_format_passes_every_bucket():
    w = torch.randn(48, 64, generator=torch.Generator().manual_seed(1))
    worst, why = verify_linear(_layer(get("float32-native"), w), w, _activations())
    assert why is None and worst <= 1.0


def test_numbers_outside_the_bound_fail():
    w = torch.randn(48, 64, generator=torch.Generator().manual_seed(1))
    fmt = WrongNumbers()
    fmt.error_bound = get("float32").error_bound            # it claims float32 accuracy: 10% off is caught
    worst, why = verify_linear(_layer(fmt, w), w, _activations())
    assert why is not None and "bound" in why and worst > 1.0


def test_broken_batch_invariance_fails():
    w = torch.randn(48, 64, generator=torch.Generator().manual_seed(1))
    _, why = verify_linear(_layer(RowCountLeaks(), w), w, _activations())
    assert why is not None and "not batch invariant" in why


def test_a_linear_failing_verification_falls_back_at_engine_build(monkeypatch):
    monkeypatch.setattr(model_plan, "all_formats", lambda: [RowCountLeaks(), get("float32-native"), get("float32")])
    monkeypatch.setattr(RowCountLeaks, "tolerance", 1.0)    # the measuring check lets it through; verification must not
    engine = build_engine(engine_config=EngineConfig(dtype="auto", kv_cache_memory=4 * 2**20), tiny=True)
    report = engine.kernel_plan.verified
    layers = [m for m in engine.runner.model.modules() if isinstance(m, PlannedLinear)]
    assert report is not None and report.checked > 0
    leaking = [m for m in layers if RowCountLeaks.name in m.bucket_formats]
    assert not leaking and set(report.failures) and all("not batch invariant" in why for why in report.failures.values())
    assert all(set(m.bucket_formats) == {"float32-native"} for m in layers if m.name in report.failures)


def test_a_cached_verdict_applies_its_fallbacks_without_verifying_again(monkeypatch):
    """The second start reads the plan and its verdict from the cache (same host, build and model): the
    failing linears fall back as before, and nothing is calibrated or verified (a start in seconds)."""
    monkeypatch.setattr(model_plan, "all_formats", lambda: [RowCountLeaks(), get("float32-native"), get("float32")])
    monkeypatch.setattr(RowCountLeaks, "tolerance", 1.0)
    monkeypatch.setattr(plan, "implausible_cells", lambda group, last: [])   # a busy host's plan is cached too
    config = EngineConfig(dtype="auto", kv_cache_memory=4 * 2**20)
    first = build_engine(engine_config=config, tiny=True).kernel_plan
    assert not first.from_cache and first.verified.failures

    def no_verification(*args, **kwargs):
        raise AssertionError("a cached verdict was verified again")

    monkeypatch.setattr(model_plan, "verify", no_verification)
    engine = build_engine(engine_config=config, tiny=True)
    second = engine.kernel_plan
    assert second.from_cache and second.verified.failures == first.verified.failures
    layers = {m.name: m for m in engine.runner.model.modules() if isinstance(m, PlannedLinear)}
    assert all(set(layers[name].bucket_formats) == {"float32-native"} for name in first.verified.failures)
    assert not any(RowCountLeaks.name in m.bucket_formats for m in layers.values())


def test_batch_invariant_linears_are_verified_up_to_64_rows():
    """Every bucket runs one batch-invariant format (the default plan): 1, 2, 4, 8 and 64 rows are checked, 5
    buckets a linear; the 16-, 32- and 256-row buckets run the same code as 64 (verify.INVARIANT_ROWS,
    TILE_ROWS)."""
    engine = build_engine(engine_config=EngineConfig(dtype="auto", kv_cache_memory=4 * 2**20), tiny=True)
    report = engine.kernel_plan.verified
    layers = [m for m in engine.runner.model.modules() if isinstance(m, PlannedLinear)]
    assert report is not None and not report.failures
    assert report.checked == 5 * len(layers) and BUCKETS[6] == 64


class RowCounts(type(get("float32-native"))):
    """float32-native (batch invariant), recording the row count of every call."""
    name = "test-row-counts"
    seen: list[int] = []

    def run(self, prepared, x):
        self.seen.append(x.shape[0])
        return super().run(prepared, x)


def test_an_invariant_linear_runs_the_small_buckets_and_its_top_one():
    """The buckets between the 8-row tile and the top one are not run; a linear with fewer rows (lm_head:
    max_rows) stops at its own top bucket, every bucket run."""
    w = torch.randn(48, 64, generator=torch.Generator().manual_seed(1))
    fmt = RowCounts()
    fmt.seen = []
    layer = _layer(fmt, w)
    assert verify_linear(layer, w, _activations(), 64)[1] is None and fmt.seen == [1, 2, 4, 8, 64]
    fmt.seen = []
    assert verify_linear(layer, w, _activations(), 5)[1] is None and fmt.seen == [1, 2, 4, 8]


@pytest.mark.parametrize("fmt, fails", [(WrongInOneTileRow(), True), (get("float32-native"), False)])
def test_a_large_linear_is_checked_on_sampled_rows_and_a_tile_slip_is_caught(fmt, fails):
    """4096 x 1024: only checked_rows' ~2k rows are dequantized and compared, yet a wrong row in every tile is
    caught; the sample is asked of the source (weight_rows), never the whole float32 weight."""
    w = torch.randn(4096, 1024, generator=torch.Generator().manual_seed(2))
    asked = []

    def rows_only(ids):
        asked.append(len(ids))
        return w[ids]

    source = LinearSource("big", torch.empty(4096, 1024, device="meta"), load_weight=lambda: w, load_rows=rows_only)
    layer = PlannedLinear(LinearSource("big", w), [[fmt.name]] * len(BUCKETS), {fmt.name: fmt, "float32": get("float32")})
    model = torch.nn.Sequential()
    model.add_module("big", layer)
    x = torch.randn(8, 1024, generator=torch.Generator().manual_seed(3))
    report = verify_model(model, {"big": source}, {"big": x}, replan=lambda name: "float32-native")
    assert asked and asked[0] < 4096 and len(checked_rows(4096, 1024)) == asked[0]
    assert bool(report.failures) == fails
