"""bench engine --dtypes: one engine per dtype, same prompts, ratios against the best fixed dtype."""
import json

from haltwise.cli import main


def test_tiny_dtypes_run(tmp_path):
    out = tmp_path / "d.json"
    assert main(["bench", "engine", "--tiny", "--dtypes", "auto", "float32", "bfloat16", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    ran = set(result["dtypes"]) | set(result["skipped"])
    assert ran == {"auto", "float32", "bfloat16"} and "auto" in result["dtypes"]
    scenarios = {(r["system"], r["scenario"]) for r in result["records"]}
    for dtype in result["dtypes"]:
        assert {(f"haltwise {dtype}", s) for s in ("throughput", "single_decode", "prefill")} <= scenarios
    assert all(r["tokens_per_s"] > 0 and r["ratio"] > 0 for r in result["records"])
    assert "auto" in result["kernel_plans"]
