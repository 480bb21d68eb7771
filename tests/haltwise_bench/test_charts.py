"""Charts are real PNG files; malformed series are rejected."""
import pytest

from haltwise_bench.charts import panel, records_panel, save_chart
from haltwise_bench.common import record

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_chart_is_a_png_with_gaps_for_missing_values(tmp_path):
    rows = [record("haltwise", "a", 10.0), record("peer", "a", 5.0), record("haltwise", "b", None)]
    p = records_panel(rows, "tokens_per_s", "t", "tokens/s")
    assert p.categories == ("a", "b")
    assert dict(p.series)["peer"] == (5.0, None)
    out = save_chart(tmp_path / "c.png", [p, panel("lat", "s", ["x"], {"p50": [1.0], "p95": [2.0]}, log_y=True)])
    assert out.read_bytes()[:8] == PNG_MAGIC


def test_series_length_must_match_categories():
    with pytest.raises(ValueError):
        panel("t", "y", ["a", "b"], {"s": [1.0]})
