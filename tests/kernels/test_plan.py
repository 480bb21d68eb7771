"""The plan keeps, per shape and row bucket, only formats that run and agree with float32, fastest first."""
import time

import pytest
import torch

from haltwise.kernels.formats import LinearFormat, LinearSource, get
from haltwise.kernels.host import probe
from haltwise.kernels.plan import BUCKETS, KernelPlan, bucket_index, measure_plan
from tests.kernels.broken_formats import BROKEN
from tests.kernels.conftest import dense_weight, grid_weight


class SlowFloat32(LinearFormat):
    """Correct, but sleeps: never the fastest."""
    name, tolerance = "test-slow", 1e-5

    def prepare(self, source):
        return source.weight.float()

    def run(self, prepared, x):
        time.sleep(0.002)
        return torch.nn.functional.linear(x, prepared)


def test_bucket_of_rows():
    assert [bucket_index(r) for r in (1, 2, 3, 4, 5, 64, 65, 256, 10000)] == [0, 1, 2, 2, 3, 6, 7, 7, 7]
    assert BUCKETS == (1, 2, 4, 8, 16, 32, 64, 256)


def test_failing_formats_are_excluded_with_their_reason():
    sources = [LinearSource("a", dense_weight()), LinearSource("b", dense_weight(seed=3))]
    plan = measure_plan(sources, [get("float32"), *BROKEN], probe())
    (group,) = plan.groups.values()
    assert group.count == 2
    assert set(group.excluded) == {f.name for f in BROKEN}
    assert "needs an ISA" in group.excluded["test-raises"]
    assert "illegal instruction" in group.excluded["test-raises-at-run"]
    assert "tolerance" in group.excluded["test-wrong"]
    assert "nan" in group.excluded["test-nan"]
    assert group.excluded["test-unavailable"] == "needs the flag no-such-isa"
    assert plan.chosen() == {group.key: ["float32"] * len(BUCKETS)}
    text = plan.describe()
    assert "excluded test-wrong" in text and "float32" in text


def test_the_fastest_correct_format_wins_every_bucket():
    plan = measure_plan([LinearSource("a", grid_weight())], [SlowFloat32(), get("float32")], probe())
    (group,) = plan.groups.values()
    assert all(r[0] == "float32" for r in (group.ranking(b) for b in range(len(BUCKETS))))
    assert group.ranking(0) == ["float32", "test-slow"]


def test_max_rows_limits_what_is_timed():
    plan = measure_plan([LinearSource("lm_head", dense_weight(), max_rows=4)], [get("float32")], probe())
    (group,) = plan.groups.values()
    times = group.ms["float32"]
    assert all(t is not None for t in times) and times[3:] == [times[2]] * (len(BUCKETS) - 3)


def test_plan_round_trips_through_json():
    plan = measure_plan([LinearSource("a", dense_weight())], [get("float32"), BROKEN[0]], probe(), cache_key="k")
    back = KernelPlan.from_json(plan.to_json())
    assert back.from_cache and back.chosen() == plan.chosen() and back.cache_key == "k"
    assert back.groups[next(iter(back.groups))].excluded == next(iter(plan.groups.values())).excluded
    stale = plan.to_json() | {"buckets": [1, 2]}
    with pytest.raises(ValueError):
        KernelPlan.from_json(stale)


class BusyAtTwoRows(LinearFormat):
    """float32, but its first `busy_calls` calls at 2 rows each lose 40 ms (a host busy while timing)."""
    name, tolerance, exact = "test-busy", 1e-5, True

    def __init__(self, busy_calls: int) -> None:
        self.busy_calls = busy_calls

    def prepare(self, source):
        return source.weight.float()

    def run(self, prepared, x):
        if x.shape[0] == 2 and self.busy_calls > 0:
            self.busy_calls -= 1
            time.sleep(0.04)
        return torch.nn.functional.linear(x, prepared)


def test_a_cell_spoiled_by_a_busy_host_is_timed_again():
    # warm-up + the first samples at 2 rows all sleep: only the re-timing round sees the real time.
    plan = measure_plan([LinearSource("a", dense_weight())], [BusyAtTwoRows(busy_calls=3)], probe())
    (group,) = plan.groups.values()
    assert group.ms["test-busy"][1] < 20.0
    assert plan.noisy == []


def test_a_cell_that_stays_implausible_marks_the_plan_noisy():
    plan = measure_plan([LinearSource("a", dense_weight())], [BusyAtTwoRows(busy_calls=10**6)], probe())
    (group,) = plan.groups.values()
    assert group.ms["test-busy"][1] >= 40.0
    assert any(cell.endswith(":test-busy:2") for cell in plan.noisy)


class CountedInvariant(LinearFormat):
    """A correct batch-invariant format that counts its calls."""
    name, tolerance, batch_invariant = "test-counted-invariant", 1e-5, True
    calls = 0

    def prepare(self, source):
        return source.weight.float()

    def run(self, prepared, x):
        CountedInvariant.calls += 1
        return torch.nn.functional.linear(x, prepared)


def test_the_batch_invariant_plan_takes_the_first_block_kernel_that_passes_its_check_untimed():
    """The float32 last resort is listed first and the block kernel last: the rule still ranks the block
    kernel first, runs it only for `check` (one call per CHECK_ROWS), and never prepares the fallback."""
    CountedInvariant.calls = 0
    plan = measure_plan([LinearSource("a", grid_weight())], [get("float32-native"), CountedInvariant()], probe(),
                        batch_invariant=True)
    (group,) = plan.groups.values()
    assert group.fixed == "test-counted-invariant" and CountedInvariant.calls == 2
    assert list(group.ms) == ["test-counted-invariant"] and not group.excluded
    assert plan.chosen() == {group.key: ["test-counted-invariant"] * len(BUCKETS)}


def test_a_block_kernel_failing_its_check_leaves_the_float32_last_resort():
    wrong = type(next(f for f in BROKEN if f.name == "test-wrong"))

    class WrongInvariant(wrong):
        name, batch_invariant = "test-wrong-invariant", True

    plan = measure_plan([LinearSource("a", grid_weight())], [get("float32-native"), WrongInvariant()], probe(),
                        batch_invariant=True)
    (group,) = plan.groups.values()
    assert group.fixed == "float32-native" and "tolerance" in group.excluded["test-wrong-invariant"]
