"""eval-tools: the judging of answers (pure), the shipped prompt set, and a real run on the tiny server.

The run starts `haltwise serve --tiny` as a subprocess and talks to it through the openai client; the
random model writes nonsense, so its tools take tiny schemas that a forced call completes within the
token budget. llama-server is skipped there (the tiny model has no GGUF), and the reason is reported.
"""
from __future__ import annotations

import argparse
import json

from haltwise_bench.eval_tools import peer_skip_reason
from haltwise_bench.tool_scoring import Answer, ToolPrompt, load_prompt_set, score, summarize
from haltwise.cli import main

SMALL = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9}},
         "required": ["n"], "additionalProperties": False}
CATALOG = {"tools": [{"type": "function", "function": {"name": "f", "description": "f", "parameters": SMALL}},
                     {"type": "function", "function": {"name": "g", "description": "g", "parameters": SMALL}}]}
WEATHER = ToolPrompt("w", "auto_call", ({"role": "user", "content": "weather?"},),
                     tuple(CATALOG["tools"]), "auto", ("f",))
NO_CALL = ToolPrompt("n", "auto_none", ({"role": "user", "content": "hi"},), tuple(CATALOG["tools"]), "auto", ())


def test_a_valid_call_to_the_right_tool() -> None:
    v = score(WEATHER, Answer("s", "w", "tool_calls", None, [("f", '{"n": 3}')]))
    assert v["calls"] == v["valid_calls"] == 1 and v["right_tool"] and v["exact_calls"]
    assert not v["invalid_structure"] and not v["problems"]


def test_calls_that_do_not_validate_are_invalid_structure_when_the_answer_claims_complete() -> None:
    for name, args in [("f", '{"n": 12}'), ("f", '{"n": 3'), ("f", "[3]"), ("h", '{"n": 1}'), ("f", '{"m": 1}')]:
        v = score(WEATHER, Answer("s", "w", "tool_calls", None, [(name, args)]))
        assert v["calls"] == 1 and v["valid_calls"] == 0 and v["invalid_structure"], (name, args)
        assert v["problems"]
    assert score(WEATHER, Answer("s", "w", "tool_calls", None, []))["invalid_structure"]   # tool_calls, no call


def test_a_call_cut_by_length_is_counted_apart_and_is_not_a_broken_promise() -> None:
    v = score(WEATHER, Answer("s", "w", "length", None, [("f", '{"n": ')]))
    assert v["calls"] == 0 and v["cut_calls"] == 1 and not v["invalid_structure"] and v["right_tool"]


def test_no_call_where_none_is_right_and_call_text_in_content() -> None:
    assert score(NO_CALL, Answer("s", "n", "stop", "Hello!"))["right_tool"]
    assert not score(NO_CALL, Answer("s", "n", "tool_calls", None, [("f", '{"n": 1}')]))["right_tool"]
    v = score(WEATHER, Answer("s", "w", "stop", '<tool_call>\n{"name": "f", "arguments": {"n": 1}}\n</tool_call>'))
    assert v["call_like_content"] and not v["right_tool"] and v["calls"] == 0
    s = summarize("s", [WEATHER, NO_CALL], [Answer("s", "w", "tool_calls", None, [("f", '{"n": 1}')]),
                                            Answer("s", "n", error="APIError: 500")])
    assert (s["calls"], s["valid_share"], s["right_tool"], s["errors"]) == (1, 1.0, 1, 1)
    assert s["finish_reasons"] == {"tool_calls": 1, "error": 1}


def test_the_shipped_prompt_set() -> None:
    prompts = load_prompt_set()
    assert len(prompts) >= 20 and len({p.id for p in prompts}) == len(prompts)
    kinds = {p.kind for p in prompts}
    assert {"auto_call", "auto_none", "required", "named", "parallel", "none"} <= kinds
    assert sum(len(p.expect) > 1 for p in prompts) >= 2 and sum(not p.expect for p in prompts) >= 4
    assert all(len(p.tools) >= 1 for p in prompts) and sum(len(p.tools) > 1 for p in prompts) >= 15
    for p in prompts:
        assert all(p.schema(n) is not None for n in p.expect), p.id


def test_the_peer_is_skipped_with_a_reason(tmp_path) -> None:
    args = argparse.Namespace(tiny=False, no_peer=False, llama_bin=str(tmp_path))
    assert "llama-server not found in" in peer_skip_reason(args)
    assert "--tiny" in peer_skip_reason(argparse.Namespace(tiny=True, no_peer=False, llama_bin=None))


def test_eval_tools_on_the_tiny_server(tmp_path, capsys) -> None:
    catalog = tmp_path / "catalog.json"
    catalog.write_text(json.dumps(CATALOG))
    named = [{"type": "function", "function": {"name": n}} for n in "fg"]
    rows = [("required", "required", ["f"], False), ("named_f", named[0], ["f"], False),
            ("named_g", named[1], ["g"], False), ("auto", "auto", ["f"], None), ("none", "none", [], None),
            ("parallel", "required", ["f"], True)]
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"id": i, "kind": "required", "messages": [{"role": "user", "content": "go"}],
                                           "tools": ["f", "g"], "tool_choice": c, "expect": e,
                                           **({} if par is None else {"parallel_tool_calls": par})}) + "\n"
                               for i, c, e, par in rows))
    out = tmp_path / "tools.json"
    assert main(["eval-tools", "--tiny", "--prompts", str(prompts), "--catalog", str(catalog), "--max-tokens", "100",
                 "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert "--tiny" in result["peer_skipped"] and [s["server"] for s in result["servers"]] == ["haltwise"]
    s = result["servers"][0]
    assert s["prompts"] == len(rows) and s["errors"] == 0 and sum(s["finish_reasons"].values()) == len(rows)
    assert s["calls"] >= 1 and s["valid_calls"] == s["calls"] and s["invalid_structure"] == 0
    answers = {a["prompt_id"]: a for a in result["answers"]["haltwise"]}
    assert answers["none"]["calls"] == [] and answers["none"]["finish_reason"] in ("stop", "length")
    for pid in ("named_f", "named_g"):
        if answers[pid]["finish_reason"] == "tool_calls":
            assert s["per_prompt"][pid]["right_tool"]
    table = capsys.readouterr().out
    assert "haltwise" in table and "llama-server skipped" in table and "named_g" in table
