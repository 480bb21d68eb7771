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


def test_grammar_mask_share_on_tiny_model(tmp_path):
    out = tmp_path / "share.json"
    assert main(["bench", "termination", "--tiny", "--tokens", "30", "--requests", "2", "--grammar",
                 "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["steps"] == 30    # the endless schema runs every request to max_tokens (prefill samples token 1)
    assert 0 < result["median_mask_us"] and 0 < result["mask_share_percent"] < 100
