"""Records, ratios, percentiles and tables shared by the benchmark programs."""
from haltwise_bench import common
from haltwise_bench.common import Timed, add_ratios, percentile, record


def test_percentile_nearest_rank():
    values = [5.0, 1.0, 4.0, 2.0, 3.0]
    assert percentile(values, 50) == 3.0
    assert percentile(values, 95) == 5.0
    assert percentile(values, 0) == 1.0
    assert percentile([], 50) is None


def test_median_ignores_missing_values():
    assert common.median([None, 1.0, 3.0]) == 2.0
    assert common.median([None]) is None


def test_ratios_are_haltwise_over_peer_and_inverted_when_lower_is_better():
    rows = [record("haltwise", "x", 30.0), record("peer", "x", 10.0),
            record("haltwise", "lat", 2.0, lower_is_better=True), record("peer", "lat", 6.0, lower_is_better=True),
            record("peer", "alone", 5.0)]
    add_ratios(rows)
    assert rows[0]["ratio"] == rows[1]["ratio"] == 3.0
    assert rows[2]["ratio"] == rows[3]["ratio"] == 3.0   # haltwise needs a third of the time
    assert rows[4]["ratio"] is None


def test_a_row_with_failed_requests_has_no_ratio():
    """Named fault: a peer whose streams were cut short (its throughput counts truncated answers)."""
    rows = [record("haltwise", "c8", 30.0, failed_requests=0), record("peer", "c8", 90.0, failed_requests=3),
            record("haltwise", "c1", 30.0, failed_requests=1), record("peer", "c1", 10.0, failed_requests=0)]
    add_ratios(rows)
    assert [r["ratio"] for r in rows] == [None, None, None, None]


def test_table_lists_every_record():
    rows = [record("haltwise", "throughput", 123.4, 0.5), record("transformers", "throughput", None)]
    table = common.format_table(rows, "title")
    assert table.splitlines()[0] == "title"
    assert "123.4" in table and "transformers" in table and "-" in table.splitlines()[-1]


def test_timed_rates():
    t = Timed(wall_s=2.0, ttft_s=(0.5,), new_tokens=31, prompt_tokens=10)
    assert t.tokens_per_s == 15.5
    assert t.decode_tokens_per_s == 30 / 1.5


def test_long_text_is_long_enough_and_peak_rss_positive():
    assert len(common.long_text(50_000)) >= 50_000
    assert common.peak_rss_mib() > 1


def test_engine_options_are_typed_and_checked():
    import pytest

    opts = common.parse_engine_options(["max_num_batched_tokens=1024", "enable_chunked_prefill=false"])
    assert opts == {"max_num_batched_tokens": 1024, "enable_chunked_prefill": False}
    assert common.parse_engine_options(None) == {}
    for bad in (["max_num_batched_token=1"], ["block_size"], ["dtype=bfloat16"]):
        with pytest.raises(ValueError):
            common.parse_engine_options(bad)
