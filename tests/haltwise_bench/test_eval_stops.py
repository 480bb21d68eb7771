"""eval-stops: the shipped prompt set, the strategy ladder, and a full run on the tiny model."""
import dataclasses
import json

import pytest

from haltwise_bench import eval_stops
from haltwise_bench.content_checks import CHECKERS
from haltwise_bench.eval_stops import STRATEGIES, Strategy, first_per_kind, load_prompt_set, strategy_params
from haltwise.cli import main
from haltwise.sampling_params import STOP_PRESETS

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SUMMARY_KEYS = {"strategy", "prompts", "judged_prompts", "completeness", "false_cuts", "truncated", "truncation_rate",
                "json_valid_rate",
                "content_ending_share", "loop_cut_share", "json_prompts", "json_parse_rate", "latency_p50_s",
                "latency_p95_s", "latency_missing", "generated_tokens", "useful_tokens", "token_efficiency",
                "runaways", "deadline_cuts", "divergences", "reasons", "by_kind"}


def test_prompt_set_is_large_and_varied():
    prompts = load_prompt_set()
    kinds = {p.kind for p in prompts}
    assert len(prompts) >= 40
    assert len(kinds) >= 5
    assert {"json", "loop"} <= kinds
    assert len({p.id for p in prompts}) == len(prompts)
    for p in prompts:
        assert p.messages and p.messages[-1]["role"] == "user"
        assert set(p.stop_presets) <= set(STOP_PRESETS)
        for s in STRATEGIES:
            strategy_params(s, p, 64, 10.0)  # every prompt is valid under every strategy
    assert all(p.stop_presets or p.stop for p in prompts if p.kind != "loop")  # each non-loop kind has its stop
    # every prompt carries its own content checker; only the loop prompts have no end
    assert all(p.check["type"] in CHECKERS for p in prompts)
    assert {p.check["type"] for p in prompts if p.kind == "loop"} == {"endless"}
    assert all(p.check["type"] != "endless" for p in prompts if p.kind != "loop")


def test_strategy_table_is_extensible():
    """A later strategy is one more row: layers plus an optional per-prompt hook."""
    p = next(p for p in load_prompt_set() if p.kind == "json")
    extra = Strategy("x test", stops=True, loops=True, extra=lambda q: {"max_tokens": 7} if q.kind == "json" else {})
    sp = extra.params(p, 32, 5.0)
    assert sp.max_tokens == 7 and sp.stop_presets == ("json",) and sp.repetition_detection.enabled


def test_each_strategy_adds_one_layer():
    p = next(p for p in load_prompt_set() if p.kind == "json")
    a, b, c, d, e = (strategy_params(s, p, 32, 5.0) for s in "abcde")
    assert a.ignore_eos and not a.stop_presets and not a.repetition_detection.enabled and a.timeout is None
    assert not b.ignore_eos and not b.stop_presets
    assert c.stop_presets == ("json",) and not c.repetition_detection.enabled
    assert d.repetition_detection.enabled and d.timeout is None
    assert e.timeout == 5.0 and e.stop_presets == ("json",) and not e.ignore_eos
    assert all(x.greedy and x.max_tokens == 32 for x in (a, b, c, d, e))


def test_json_prompts_carry_the_schema_they_ask_for():
    from haltwise.structured.schema_check import check_schema

    json_prompts = [p for p in load_prompt_set() if p.kind == "json"]
    assert json_prompts and all("schema" in p.check for p in json_prompts)
    for p in json_prompts:
        check_schema(p.check["schema"], "check.schema")  # a schema the server accepts
        asked = p.messages[-1]["content"]
        schema = p.check["schema"]
        assert ("array" in asked or "list" in asked) == (schema["type"] == "array") or "key" in asked, p.id
        for key in schema.get("properties", {}):
            assert f'"{key}"' in asked, (p.id, key)  # every required key is one the prompt names


def test_first_per_kind_keeps_file_order():
    prompts = load_prompt_set()
    subset = first_per_kind(prompts, 1)
    assert [p.kind for p in subset] == list(dict.fromkeys(p.kind for p in prompts))


def test_tiny_run_writes_complete_records(tmp_path, capsys):
    out, png = tmp_path / "e.json", tmp_path / "e.png"
    rc = main(["eval-stops", "--tiny", "--per-kind", "1", "--max-tokens", "12", "--deadline", "120",
               "--json", str(out), "--png", str(png)])
    assert rc == 0
    result = json.loads(out.read_text())
    assert [s["strategy"] for s in result["strategies"]] == list(STRATEGIES)
    n = len(result["kinds"])
    assert n >= 5
    for s in result["strategies"]:
        assert set(s) == SUMMARY_KEYS
        assert s["prompts"] == n and sum(s["reasons"].values()) == n
        assert s["completeness"] is None or 0.0 <= s["completeness"] <= 1.0
        assert 0.0 <= s["token_efficiency"] <= 1.0 and s["latency_missing"] == 0
        assert s["useful_tokens"] <= s["generated_tokens"] <= n * 12
        if s["strategy"] != "f":  # greedy: every output a prefix of one sequence (checked, not assumed)
            assert s["divergences"] == 0
    assert result["reference_strategy"] == "b"
    assert {d["strategy"] for d in result["divergences"]} <= {"f"}  # a grammar may steer off the greedy path
    assert set(result["content_ends"]) == {g["prompt_id"] for g in result["generations"]["a"]}
    a = result["strategies"][0]
    assert a["runaways"] == n and a["reasons"] == {"max_tokens": n}  # no eos, no stops: every one runs to the limit
    assert a["generated_tokens"] == n * 12
    for gens in result["generations"].values():
        assert {g["prompt_id"] for g in gens} == {g["prompt_id"] for g in result["generations"]["a"]}
    assert png.read_bytes()[:8] == PNG_MAGIC
    assert "a max_tokens only" in capsys.readouterr().out


def test_loads_a_custom_prompt_file(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"id": "x", "kind": "k", "messages": [{"role": "user", "content": "hi"}]}) + "\n")
    (p,) = load_prompt_set(path)
    assert p.stop == () and p.stop_presets == () and p.kind == "k"
    with pytest.raises(KeyError):
        path.write_text(json.dumps({"id": "x"}) + "\n")
        eval_stops.load_prompt_set(path)


def test_strategy_f_constrains_only_json_prompts_and_g_picks_presets_itself():
    from haltwise_bench.eval_stops import load_prompt_set, strategy_params

    prompts = {p.kind: p for p in load_prompt_set()}
    f_json = strategy_params("f", prompts["json"], 64, 30.0)
    assert f_json.structured_outputs is not None
    assert json.loads(f_json.structured_outputs.json) == prompts["json"].check["schema"]
    bare = dataclasses.replace(prompts["json"], check={"type": "json"})  # no schema: any JSON object
    assert strategy_params("f", bare, 64, 30.0).structured_outputs.json_object
    assert strategy_params("f", prompts["list"], 64, 30.0).structured_outputs is None
    g_json, g_list = (strategy_params("g", prompts[k], 64, 30.0) for k in ("json", "list"))
    assert g_json.stop_presets == ("json",) and "auto -> json" in g_json.auto_presets
    assert g_list.stop_presets == ("paragraph",) and g_list.stop == ()
    assert g_list.repetition_detection.enabled and g_list.timeout is None
