"""`haltwise eval-kv` on the tiny model: float32 KV is its own reference; the other dtypes are measured
on the same positions and prompts, and land near it."""
import json

from haltwise.cli import main


def test_eval_kv_reports_each_dtype_against_float32(tmp_path, capsys) -> None:
    out = tmp_path / "kv.json"
    code = main(["eval-kv", "--tiny", "--lengths", "128,384", "--greedy-at", "64,200", "--greedy-tokens", "24",
                 "--chunk", "96", "--json", str(out)])
    assert code == 0
    result = json.loads(out.read_text())
    ref = result["runs"]["float32"]
    assert [(r["from"], r["to"]) for r in ref["ranges"]] == [(0, 128), (128, 383)]
    assert all(r["delta_pct"] == 0.0 for r in ref["ranges"])
    assert all(a == {"same": 1.0, "first_difference": None} for a in ref["agreement"])
    for dtype in ("bfloat16", "int8"):
        run = result["runs"][dtype]
        assert len(run["greedy"]) == 2 and all(len(g) == 24 for g in run["greedy"])
        assert all(abs(r["delta_pct"]) < 5.0 for r in run["ranges"]), run["ranges"]
    table = capsys.readouterr().out
    assert "int8" in table and "bfloat16" in table and "greedy@64" in table


def test_eval_kv_refuses_an_unknown_dtype(capsys) -> None:
    assert main(["eval-kv", "--tiny", "--kv-dtypes", "float32,fp4"]) == 2
    assert "fp4" in capsys.readouterr().err
