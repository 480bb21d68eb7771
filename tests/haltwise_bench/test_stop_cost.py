"""Smoke test: the stop-cost microbenchmark runs on a small input and writes valid JSON."""
import json

from haltwise_bench import stop_cost


def test_main_runs_small_and_writes_json(tmp_path, capsys):
    text = tmp_path / "text.txt"
    text.write_text("Full fathom five thy father lies; of his bones are coral made.\n" * 40, encoding="utf-8")
    out = tmp_path / "r.json"
    assert stop_cost.main(["--tokens", "200", "--stops", "8", "--text", str(text), "--repeats", "1",
                           "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["tokens"] == 200 and result["stops"] == 8
    for key in ("stopper_median_ns", "naive_median_ns", "tail_search_median_ns"):
        assert result[key] > 0
    assert result["ratio_median"] == result["naive_median_ns"] / result["stopper_median_ns"]
    assert "naive re-search" in capsys.readouterr().out


def test_stops_never_occur_in_the_generated_text():
    text = stop_cost.load_text(None, 4000, seed=1)
    tokens = stop_cost.make_tokens(text, 300, seed=1)
    generated = "".join(tokens)
    stops = stop_cost.make_stops(text, generated, 16, seed=1)
    assert len(stops) == 16 and not any(s in generated for s in stops)
    assert 2 <= min(map(len, tokens)) and max(map(len, tokens)) <= 6
