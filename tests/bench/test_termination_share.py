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
