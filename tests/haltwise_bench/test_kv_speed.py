"""`haltwise bench kv` runs every KV dtype on the same weights and reports rates against float32 KV."""
from __future__ import annotations

import json

from haltwise_bench.kv_speed import kv_records
from haltwise.cli import main


def test_ratios_are_against_float32_kv_of_the_same_scenario():
    rows = kv_records({("float32", 1): [10.0, 12.0], ("int8", 1): [15.0, 18.0], ("int8", 32): [50.0]}, 2, 8, 16)
    by = {(r["extra"]["kv_dtype"], r["extra"]["clients"]): r for r in rows}
    assert by[("int8", 1)]["ratio"] == round(16.5 / 11.0, 3) and by[("float32", 1)]["ratio"] == 1.0
    assert by[("int8", 32)]["ratio"] is None                    # no float32 row to compare with


def test_tiny_run_times_each_dtype_to_full_length(tmp_path, capsys):
    out = tmp_path / "kv.json"
    assert main(["bench", "kv", "--tiny", "--kv-dtypes", "float32,int8", "--clients", "1", "4",
                 "--json", str(out)]) == 0
    records = json.loads(out.read_text())["records"]
    assert {(r["extra"]["kv_dtype"], r["extra"]["clients"]) for r in records} == {
        ("float32", 1), ("int8", 1), ("float32", 4), ("int8", 4)}
    assert all(r["tokens_per_s"] > 0 for r in records)
    assert "KV int8" in capsys.readouterr().out
