"""The eval-stops yardstick on hand-made generations, where every number is known, and the faults the
old yardstick scored as perfect (a list cut after "Here:", JSON followed by a sentence, a missing
latency read as 0, outputs that are not prefixes of one greedy sequence)."""
import pytest

from haltwise_bench import stop_metrics
from haltwise_bench.content_checks import content_end
from haltwise_bench.stop_metrics import (ContentEnd, Generation, divergences, ending, json_ok, reference_content_ends,
                                         summarize)

CHECKS = {"p1": {"type": "json"}, "p2": {"type": "endless"}, "p3": {"type": "items", "items": 3}}
LIST = "Here:\n- a\n- b\n- c\n\nAnything else?"


def g(pid, kind, reason, text, latency=1.0, ids=None):
    ids = tuple(range(len(text))) if ids is None else ids  # one token per character
    return Generation(pid, kind, reason, len(ids), latency, text, ids)


def by_chars(gen, k):
    return k  # one token per character in these generations


def test_endings():
    assert [ending(r) for r in ("eos", "stop_string", "stop_token")] == ["content"] * 3
    assert ending("repetition") == "loop"
    assert [ending(r) for r in ("max_tokens", "context_limit")] == ["limit"] * 2
    assert ending("timeout") == "deadline"
    assert ending("error") == "other"


def test_json_ok_decodes_the_first_value_and_allows_prose_after_it():
    assert json_ok('Here it is: {"a": 1}')
    assert json_ok('```json\n[1, 2]\n```')
    assert json_ok('{"a": 1} and then one sentence.')  # the old check failed this (favouring the json preset)
    assert not json_ok('{"a": ')
    assert not json_ok("no json here")


@pytest.mark.parametrize("check, text, eos, end", [
    ({"type": "sentence"}, "Paris is the capital. It is big.", False, 21),
    ({"type": "sentence"}, "144", True, 3),
    ({"type": "sentence"}, "144", False, None),
    ({"type": "items", "items": 3}, LIST, False, LIST.index("- c") + 3),
    ({"type": "items", "items": 3}, "Here:\n- a\n- b", True, None),
    ({"type": "json"}, 'x {"a": [1, "}"]} y', False, 17),
    ({"type": "code"}, "Sure:\n```python\nx = 1\n```\nDone", False, 25),
    ({"type": "code"}, "```python\nx = 1\n", True, None),
    ({"type": "turn"}, "About 14 million.\nUser: thanks", False, 17),
    ({"type": "turn"}, "About 14 million.", True, 17),
    ({"type": "endless"}, "hello hello", True, None),
    ({"type": "reply"}, "The weekend was fun.  ", True, 20),
    ({"type": "reply"}, "The weekend was fun", False, None),  # never ended by the model: no known end
    ({"type": "reply", "marker": "end"}, "A legend, endless. end", True, 18),  # the marker as a word only
    ({"type": "reply", "marker": "end"}, "A legend, endless.", True, 18),
])
def test_content_checkers(check, text, eos, end):
    assert content_end(check, text, eos) == end


def test_summary_numbers_against_independent_content_ends():
    reference = [g("p1", "json", "eos", '{"a": 1} ok'), g("p2", "loop", "max_tokens", "la " * 20),
                 g("p3", "list", "eos", LIST)]
    ends = reference_content_ends(reference, CHECKS, by_chars)
    list_end = LIST.index("- c") + 3
    assert ends == {"p1": ContentEnd(8, 8), "p2": ContentEnd(None, None), "p3": ContentEnd(list_end, list_end)}
    runaway = [g("p1", "json", "max_tokens", '{"a": 1} ok' + "x" * 53, 4.0),
               g("p2", "loop", "max_tokens", "la " * 20, 2.0),
               g("p3", "list", "max_tokens", LIST + "y" * 20, 3.0)]
    s = summarize("a", runaway, ends, CHECKS)
    assert s["judged_prompts"] == 2 and s["completeness"] == 1.0 and s["false_cuts"] == 0
    assert s["runaways"] == 3 and s["content_ending_share"] == 0.0
    assert s["generated_tokens"] == 64 + 60 + len(LIST) + 20
    assert s["useful_tokens"] == 8 + 0 + list_end  # the loop's tokens bought no complete answer
    assert s["json_parse_rate"] == 1.0
    assert s["latency_p50_s"] == 3.0 and s["latency_p95_s"] == 4.0 and s["latency_missing"] == 0
    table = stop_metrics.format_table([s], {"a": "a only"})
    assert "a only" in table and "false cut" in table and len(table.splitlines()) == 3


def test_a_list_cut_after_here_is_a_false_cut_not_complete():
    """Named fault: a stop that ends a list after its introduction. The old yardstick (d's own end as
    reference, completeness = ended by a stop) scored it complete with efficiency 1.00."""
    reference = [g("p3", "list", "eos", LIST)]
    ends = reference_content_ends(reference, CHECKS, by_chars)
    cut = g("p3", "list", "stop_string", "Here:")
    s = summarize("d", [cut], ends, CHECKS)
    assert s["content_ending_share"] == 1.0  # what the old "complete" measured
    assert s["completeness"] == 0.0 and s["false_cuts"] == 1 and s["truncated"] == 1
    assert s["token_efficiency"] == 1.0 and s["by_kind"]["list"]["false_cuts"] == 1
    # a stop after the content: complete, and the tokens past the content end are waste
    late = g("p3", "list", "stop_string", LIST[:-5])
    s = summarize("d", [late], ends, CHECKS)
    assert s["completeness"] == 1.0 and s["false_cuts"] == 0 and s["token_efficiency"] < 1.0


def test_json_validity_against_the_prompts_schema():
    from haltwise_bench.content_checks import json_value_valid

    schema = {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 2}
    assert json_value_valid("Sure: [2, 4] done", schema)
    assert not json_value_valid("[2, 4, 6]", schema) and not json_value_valid('{"a": 1}', schema)
    assert not json_value_valid("[2, ", schema)
    checks = {"j1": {"type": "json", "schema": schema}, "j2": {"type": "json"}}
    gens = [g("j1", "json", "eos", "[1, 2, 3]"), g("j2", "json", "eos", "[1]")]
    s = summarize("f", gens, {"j1": ContentEnd(9, 9), "j2": ContentEnd(3, 3)}, checks)
    assert s["json_parse_rate"] == 1.0 and s["json_valid_rate"] == 0.0  # only j1 has a schema, and fails it
    assert s["truncation_rate"] == 0.0 and "valid" in stop_metrics.format_table([s], {})


def test_subset_cuts_judge_only_the_subset():
    reference = [g("p1", "json", "eos", '{"a": 1}'), g("p3", "list", "eos", LIST)]
    ends = reference_content_ends(reference, CHECKS, by_chars)
    gens = [g("p1", "json", "stop_string", '{"a"'), g("p3", "list", "stop_string", "Here:")]
    row = stop_metrics.subset_cuts("e", gens, ends, CHECKS, set(), {"p3"})
    assert row == {"strategy": "e", "prompts": 1, "judged_prompts": 1, "false_cuts": 1, "false_cut_rate": 1.0,
                   "completeness": 0.0, "runaways": 0, "false_cut_prompts": ["p3"]}
    table = stop_metrics.format_word_table([row], {"e": "e prefix"})
    assert "e prefix" in table and table.splitlines()[-1].endswith("p3")


def test_missing_latency_is_not_zero():
    s = summarize("x", [g("p1", "json", "eos", '{"a": 1}', latency=None), g("p1", "json", "eos", '{"a": 1}', 2.0)],
                  {"p1": ContentEnd(8, 8)}, CHECKS)
    assert s["latency_missing"] == 1 and s["latency_p50_s"] == 2.0


def test_divergences_are_found_and_judged_on_their_own_text():
    gens = {"a": [g("p1", "json", "max_tokens", "x", ids=(1, 2, 3, 4, 5))],
            "b": [g("p1", "json", "eos", "x", ids=(1, 2, 3))],
            "d": [g("p1", "json", "stop_string", '{"b": 2}', ids=(1, 9))]}
    found = divergences(gens)
    assert found == [{"strategy": "d", "prompt_id": "p1", "first_different_token": 1}]
    ends = {"p1": ContentEnd(None, None)}
    s = summarize("d", gens["d"], ends, CHECKS, {("d", "p1")})
    assert s["divergences"] == 1 and s["completeness"] == 1.0  # its own text holds a JSON value
