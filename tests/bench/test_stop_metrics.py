"""The eval-stops metrics on hand-made generations, where every number is known."""
from haltwise.bench import stop_metrics
from haltwise.bench.stop_metrics import Generation, ending, json_ok, reference_ends, summarize


def g(pid, kind, reason, generated, latency=1.0, text=""):
    return Generation(pid, kind, reason, generated, latency, text)


def test_endings():
    assert [ending(r) for r in ("eos", "stop_string", "stop_token")] == ["content"] * 3
    assert ending("repetition") == "loop"
    assert [ending(r) for r in ("max_tokens", "context_limit")] == ["limit"] * 2
    assert ending("timeout") == "deadline"
    assert ending("error") == "other"


def test_json_ok_extracts_from_first_bracket_and_rejects_trailing_text():
    assert json_ok('Here it is: {"a": 1}')
    assert json_ok('```json\n[1, 2]\n```')
    assert not json_ok('{"a": 1} and then the model kept talking')
    assert not json_ok('{"a": ')
    assert not json_ok("no json here")


def test_summary_numbers():
    reference = [g("p1", "json", "eos", 10), g("p2", "loop", "repetition", 20), g("p3", "list", "max_tokens", 64)]
    ref = reference_ends(reference)
    assert ref == {"p1": 10, "p2": 20, "p3": None}
    runaway = [g("p1", "json", "max_tokens", 64, 4.0, '{"a": 1} trailing'), g("p2", "loop", "max_tokens", 64, 2.0),
               g("p3", "list", "max_tokens", 64, 3.0)]
    s = summarize("a", runaway, ref)
    assert s["completeness"] == 0.0
    assert s["runaways"] == 3
    assert s["generated_tokens"] == 192
    assert s["useful_tokens"] == 10 + 20 + 64
    assert s["token_efficiency"] == (10 + 20 + 64) / 192
    assert s["json_parse_rate"] == 0.0
    assert s["latency_p50_s"] == 3.0 and s["latency_p95_s"] == 4.0
    assert s["reasons"] == {"max_tokens": 3} and s["deadline_cuts"] == 0
    cut = summarize("e", [g("p1", "json", "timeout", 3, text='{"a"')], ref)
    assert cut["runaways"] == 0 and cut["deadline_cuts"] == 1 and cut["completeness"] == 0.0
    good = summarize("d", [g("p1", "json", "eos", 10, text='{"a": 1}'), reference[1], reference[2]], ref)
    assert good["completeness"] == 1 / 3 and good["loop_cut_share"] == 1 / 3
    assert good["json_parse_rate"] == 1.0 and good["token_efficiency"] == 1.0 and good["runaways"] == 1
    assert set(good["by_kind"]) == {"json", "loop", "list"}
    table = stop_metrics.format_table([s, good], {"a": "a only"})
    assert "a only" in table and len(table.splitlines()) == 4
