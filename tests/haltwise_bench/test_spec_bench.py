"""`haltwise bench spec`: speculation off vs on in one engine, same tokens, N copies of a prompt at once."""
from __future__ import annotations

import json

from haltwise.cli import main


def test_tiny_run_at_concurrency_drafts_only_where_the_batch_limit_allows(tmp_path, capsys):
    """Three copies of each prompt run together (and end together): with --max-batch 1 no step has a
    lone decode, so nothing is drafted; with none they draft and accept. Every setting gives the
    tokens decoding without drafts gives (a mismatch makes the bench exit 1)."""
    out = tmp_path / "spec.json"
    assert main(["bench", "spec", "--tiny", "--concurrency", "3", "--max-batch", "none", "1", "--speculative-k", "2",
                 "--rounds", "1", "--max-tokens", "16", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["mismatches"] == 0 and result["concurrency"] == 3
    rows = {(r["set"], r["k"], r["max_batch"]): r for r in result["rows"]}
    for name in ("echo", "plain"):
        assert rows[(name, 2, None)]["acceptance"] > 0
        assert rows[(name, 2, 1)]["acceptance"] is None
        assert rows[(name, 0, None)]["ratio"] == 1.0 and rows[(name, 0, None)]["tok_s"] > 0
    assert "concurrency 3" in capsys.readouterr().out


def test_tiny_run_with_a_draft_model_reports_its_row_and_acceptance(tmp_path):
    """--draft-model adds a `draft` setting beside off; natural chat (`--sets chat`); same tokens."""
    out = tmp_path / "spec.json"
    assert main(["bench", "spec", "--tiny", "--draft-model", "tiny:1:2", "--sets", "chat", "--speculative-k",
                 "--rounds", "1", "--max-tokens", "16", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["mismatches"] == 0
    rows = {r["k"]: r for r in result["rows"]}
    assert set(rows) == {0, "draft"} and {r["set"] for r in result["rows"]} == {"chat"}
    assert rows["draft"]["acceptance"] > 0 and rows[0]["acceptance"] is None
