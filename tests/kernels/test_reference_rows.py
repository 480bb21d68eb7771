"""The output rows held to a float32 reference: every edge tile and every tile residue, a bounded sample."""
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from haltwise.kernels.formats import LinearSource, get
from haltwise.kernels.plan import check
from haltwise.kernels.reference_rows import CHECK_WEIGHTS, EDGE_ROWS, checked_rows
from tests.kernels.broken_formats import WrongInOneTileRow


@settings(max_examples=200, deadline=None)
@given(out=st.integers(1, 200_000), k=st.sampled_from([64, 896, 1536, 2048, 8960, 18944]))
def test_checked_rows_cover_the_edges_and_every_tile_residue(out, k):
    rows = checked_rows(out, k)
    assert torch.equal(rows, rows.unique()) and int(rows.min()) == 0 and int(rows.max()) == out - 1
    if len(rows) < out:                                   # sampled: head and tail tiles whole, every residue
        assert set(range(EDGE_ROWS)) | set(range(out - EDGE_ROWS, out)) <= set(rows.tolist())
        assert {r % 64 for r in rows.tolist()} == set(range(64))
        assert len(rows) * k <= 2 * max(CHECK_WEIGHTS, 4 * EDGE_ROWS * k)


def test_the_plan_checks_a_large_linear_on_the_sampled_rows_alone():
    """4096 x 1024: the plan's check asks the source for checked_rows' rows only (never the whole float32
    weight), passes a correct format and catches one wrong row in every 64-row tile."""
    w = torch.randn(4096, 1024, generator=torch.Generator().manual_seed(2))
    asked = []

    def whole():
        raise AssertionError("the whole weight was dequantized")

    def rows_only(ids):
        asked.append(len(ids))
        return w[ids]

    source = LinearSource("big", torch.empty(4096, 1024, device="meta"), load_weight=whole, load_rows=rows_only)
    good, wrong = get("float32-native"), WrongInOneTileRow()
    assert check(good, good.prepare(LinearSource("big", w)), source) is None
    assert asked == [len(checked_rows(4096, 1024))] and asked[0] < 4096
    assert "tolerance" in check(wrong, wrong.prepare(LinearSource("big", w)), source)
