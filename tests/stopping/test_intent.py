"""stop_presets "auto": the rule classifier over a table of prompts and over eval-stops' prompts."""
import json
from importlib import resources

import pytest

from haltwise.sampling_params import SamplingParams
from haltwise.server.surfaces.openai_protocol import ChatCompletionRequest, CompletionRequest
from haltwise.stopping.intent import Intent, classify, classify_many, resolve_auto
from haltwise.stopping.sequence_stopper import SequenceStopper
from haltwise.stopping.termination import Reason

TABLE = [
    ("Return the result as JSON.", ("json",)),
    ("Give me a json array of colours", ("json",)),
    ("Write a JSON list of numbers in a code block", ("json",)),             # JSON wins over code
    ("Show me the code for a web server", ("code_block",)),
    ("```\nfix this\n```", ("code_block",)),
    ("Implement quicksort in Rust.", ("code_block",)),
    ("Write a function that parses dates", ("code_block",)),
    ("List the planets.", ("paragraph",)),
    ("Give three reasons, one per line", ("paragraph",)),
    ("Name four rivers as a bulleted list", ("paragraph",)),
    ("What is the capital of Peru?", ("line",)),
    ("How many moons does Mars have?", ("line",)),
    ("Who painted the Mona Lisa? One word.", ("line",)),
    ("Spell 'cat' backwards. Give only the answer.", ("line",)),
    ("Why is the sky blue?", ()),                                            # an explanation, not a fact
    ("What is love? Explain at length, with examples and history, in several paragraphs, covering poetry, "
     "philosophy, biology and modern psychology?", ()),                     # too long for a one-liner
    ("Tell me a story about a dragon.", ()),
    ("Hello!", ()),
    ("", ()),
]


@pytest.mark.parametrize("text, presets", TABLE)
def test_table(text, presets):
    assert classify(text).presets == presets


# eval-stops kinds whose hand-chosen preset the classifier should find; chat (turn) and loop are out of its range
EXPECTED = {"short_answer": ("line",), "list": ("paragraph",), "json": ("json",), "code": ("code_block",)}


def eval_prompts():
    path = resources.files("haltwise_bench.data").joinpath("stop_prompts.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_eval_stops_prompts_get_their_kinds_preset():
    prompts = eval_prompts()
    structural = [p for p in prompts if p["kind"] in EXPECTED]
    assert len(structural) == 30
    hits = [p["id"] for p in structural if classify(p["messages"][-1]["content"]).presets == EXPECTED[p["kind"]]]
    assert len(hits) == len(structural), sorted({p["id"] for p in structural} - set(hits))
    for p in structural:  # the dataset's own hand-chosen presets agree with the kind table
        assert tuple(p["stop_presets"]) == EXPECTED[p["kind"]]


def test_classify_many_agrees_or_gives_none():
    assert classify_many(["Return JSON.", "as JSON please"]).presets == ("json",)
    assert classify_many(["Return JSON.", "List fruits"]) == Intent((), "the prompts disagree")
    assert classify_many(["Return JSON.", None]).presets == ()


def test_resolve_auto_replaces_auto_and_keeps_the_others():
    p = resolve_auto(SamplingParams(stop_presets=("turn", "auto")), ["List the planets."])
    assert p.stop_presets == ("turn", "paragraph") and p.auto_presets == "auto -> paragraph: asks for a list"
    same = SamplingParams(stop_presets=("line",))
    assert resolve_auto(same, ["Return JSON"]) is same
    assert resolve_auto(SamplingParams(stop_presets=("json", "auto")), ["JSON"]).stop_presets == ("json",)


def test_protocol_resolves_auto_on_the_last_user_turn_and_the_prompt():
    chat = ChatCompletionRequest.model_validate({"stop_presets": ["auto"], "messages": [
        {"role": "user", "content": "Return JSON."}, {"role": "assistant", "content": "{}"},
        {"role": "user", "content": "What is the capital of Peru?"}]}).to_sampling_params()
    assert chat.stop_presets == ("line",) and chat.auto_presets.startswith("auto -> line")
    comp = CompletionRequest.model_validate({"prompt": ["List a", "List b"], "stop_presets": ["auto"]})
    assert comp.to_sampling_params().stop_presets == ("paragraph",)
    ids = CompletionRequest.model_validate({"prompt": [1, 2, 3], "stop_presets": ["auto"]}).to_sampling_params()
    assert ids.stop_presets == () and ids.auto_presets == "auto -> none: no prompt text (token ids)"


def test_the_choice_is_in_the_termination_detail_and_the_preset_cuts():
    p = resolve_auto(SamplingParams(max_tokens=50, stop_presets=("auto",)), ["What is 2+2? One word."])
    s = SequenceStopper(p, frozenset({2}), {}, num_prompt_tokens=3, max_total_tokens=100)
    assert s.on_token(10, "Four") is None
    term = s.on_token(11, ".\nAnd more")
    assert term.reason is Reason.STOP_STRING and term.stop_reason == "line"
    assert term.detail.endswith("[auto -> line: asks for a short answer]")
    s.finish(term)
    assert s.text == "Four."
    unresolved = SequenceStopper(SamplingParams(max_tokens=1, stop_presets=("auto",)), frozenset({2}), {}, 3, 100)
    assert unresolved.on_token(10, "x\n").reason is Reason.MAX_TOKENS   # an unresolved "auto" adds nothing


@pytest.mark.parametrize("text, report", [
    ("Return JSON.", "auto -> json: mentions JSON"),
    ("```\nfix this\n```", "auto -> code_block: asks for code"),
    ("Implement quicksort in Rust.", "auto -> code_block: asks to write code"),
    ("List the planets.", "auto -> paragraph: asks for a list"),
    ("Briefly, name a colour", "auto -> line: asks for a short answer"),
    ("What is the capital of Peru?", "auto -> line: a one-line factual question"),
    ("Hello!", "auto -> none: no structure asked for"),
    ("What is\nthe capital of Peru?", "auto -> none: no structure asked for"),     # a question on two lines
    ("What " + "is " * 18 + "it?", "auto -> line: a one-line factual question"),   # 20 words: still short
])
def test_every_rule_names_itself_in_the_report(text, report):
    assert classify(text).report() == report          # the default is "no grammar"


def test_report_marks_json_a_no_op_under_a_grammar_only():
    assert classify("Return JSON.").report(grammar=True) == "auto -> json: mentions JSON (no-op under a grammar)"
    assert classify("List the planets.").report(grammar=True) == "auto -> paragraph: asks for a list"
    assert Intent(("json", "line"), "r").report() == "auto -> json,line: r"
    grammar = SamplingParams(stop_presets=("auto",), structured_outputs={"json_object": True})
    assert resolve_auto(grammar, ["Return JSON."]).auto_presets.endswith("(no-op under a grammar)")
    assert resolve_auto(SamplingParams(stop_presets=("auto",)), ["Return JSON."]).auto_presets == \
        "auto -> json: mentions JSON"


def test_classify_many_says_when_different_rules_agree():
    # a factual question and a request for brevity: both "line", by two rules
    assert classify_many(["What is the capital of Peru?", "Briefly, name a colour"]) == \
        Intent(("line",), "all prompts agree")
    assert classify_many(["Return JSON.", "as JSON please"]) == Intent(("json",), "mentions JSON")   # one rule
