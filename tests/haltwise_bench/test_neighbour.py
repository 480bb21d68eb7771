"""`haltwise bench neighbour` runs quiet and busy rows on the tiny model and leaves nothing spinning."""
import json

from haltwise_bench.neighbour import Neighbour, neighbour_records
from haltwise.cli import main


def test_neighbour_bench_on_tiny_model(tmp_path, capsys):
    out = tmp_path / "n.json"
    assert main(["bench", "neighbour", "--tiny", "--threads", "2", "1", "--clients", "1", "2", "--busy", "1",
                 "--busy-limit", "30", "--json", str(out)]) == 0
    records = json.loads(out.read_text())["records"]
    keys = {(r["extra"]["threads"], r["extra"]["clients"], r["extra"]["load"]) for r in records}
    assert keys == {(t, c, load) for t in (2, 1) for c in (1, 2) for load in ("quiet", "busy")}
    assert all(r["tokens_per_s"] > 0 for r in records)
    assert all((r["ratio"] is not None) == (r["extra"]["load"] == "busy") for r in records)
    assert "busy / quiet" in capsys.readouterr().out


def test_busy_processes_are_stopped_when_the_block_ends():
    with Neighbour(2, limit_s=30) as n:
        assert all(p.poll() is None for p in n.procs)
    assert all(p.poll() is not None for p in n.procs)


def test_busy_row_carries_busy_over_quiet_medians():
    rows = neighbour_records({("pool", 2, 1, "quiet"): [100.0, 120.0, 110.0], ("pool", 2, 1, "busy"): [66.0]}, 3, 1, 8)
    quiet, busy = rows
    assert quiet["ratio"] is None and quiet["tokens_per_s"] == 110.0
    assert busy["ratio"] == 0.6
