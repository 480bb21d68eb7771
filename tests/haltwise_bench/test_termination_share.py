"""The termination-share program runs on the tiny model and reports a consistent breakdown."""
import json

from haltwise.cli import main


def test_termination_share_on_tiny_model(tmp_path, capsys):
    out = tmp_path / "share.json"
    assert main(["bench", "termination", "--tiny", "--tokens", "40", "--requests", "3", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["stops"] == 16 and result["requests"] == 3 and result["steps"] >= 2
    assert 0 < result["median_checks_us"] and 0 < result["median_share_percent"] < 100
    assert "median_share_percent" in capsys.readouterr().out


def test_grammar_cost_against_the_default_step_on_tiny_model(tmp_path, capsys):
    out = tmp_path / "share.json"
    assert main(["bench", "termination", "--tiny", "--tokens", "12", "--grammar", "--rows", "1,3", "--rounds", "2",
                 "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["dtype"] == "auto"             # the default decode path, not the float32 oracle
    assert set(result["rows"]) == {"1", "3"}
    for r in result["rows"].values():
        # the endless schema runs every request to max_tokens: 11 decode steps per run (prefill samples token 1),
        # both runs of both rounds pooled
        assert r["decode_steps"] == 2 * 11
        assert 0 < r["median_step_ms_plain"] and 0 < r["median_step_ms_grammar"]
        assert abs(r["step_ratio"] - r["median_step_ms_grammar"] / r["median_step_ms_plain"]) < 0.01
        assert 0 < r["median_mask_us"] and 0 < r["mask_share_percent"] < 100
    assert "grammar mask cost against the auto decode step" in capsys.readouterr().out
