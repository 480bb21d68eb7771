"""A loop inside a run of tool calls: cut after the last complete call, finish "tool_calls", nothing retracted.

Unit level: CallEnds' candidates and holdback, then SequenceStopper (the exact and the near detector) with
the tool-call constraint settling the record. Through the engine and HTTP: tests/server/test_http_structures_end.py.
"""
from __future__ import annotations

import json

from haltwise.sampling_params import RepetitionDetection, SamplingParams
from haltwise.stopping.sequence_stopper import SequenceStopper
from haltwise.stopping.termination import Reason
from haltwise.structured.spec import StructuredOutputs
from haltwise.toolcalls.call_ends import CallEnds
from haltwise.toolcalls.constraint import ToolCallConstraint
from haltwise.toolcalls.formats.hermes import HERMES
from haltwise.toolcalls.formats.mistral import MISTRAL
from haltwise.toolcalls.spec import ToolSpec

WEATHER = ToolSpec("get_weather", None, json.dumps({"type": "object", "properties": {"city": {"type": "string"}}}))
HEAD = '{"name": "get_weather", "arguments": {"city": "'


def call(city: str) -> str:
    return f'<tool_call>\n{HEAD}{city}"}}}}\n</tool_call>'


def test_candidates_are_each_complete_calls_body_and_section_end() -> None:
    ends = CallEnds(HERMES)
    text = call("Paris") + "\n" + call("Rome") + "\n<tool_call>\n" + HEAD + "Ber"
    ends.feed(text)
    first, second = len(call("Paris")), len(call("Paris")) + 1 + len(call("Rome"))
    body = len("\n</tool_call>")
    assert ends.candidates() == [(first - body, False), (first, True), (second - body, False), (second, True)]
    assert ends.pending() == len(text) - (second - body)      # the open call (and the section end) held back


def test_content_after_a_call_clears_the_candidates() -> None:
    ends = CallEnds(HERMES)
    ends.feed(call("Paris") + "\nLet me also check Rome. <tool_call>\n" + HEAD + "Ro")
    assert ends.candidates() == [] and ends.pending() == 0
    ends.feed('me"}}\n</tool_call>')
    assert len(ends.candidates()) == 2


def test_a_separator_format_cuts_after_a_body_inside_the_section() -> None:
    ends = CallEnds(MISTRAL)
    body = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
    ends.feed("[TOOL_CALLS][" + body + ', {"name": "get_we')
    assert ends.candidates() == [(len("[TOOL_CALLS][" + body), False)]


def test_pieces_of_any_size_give_the_same_candidates() -> None:
    text = call("Paris") + "\n" + call("Rome") + "\n<tool_call>\n" + HEAD
    whole, pieces = CallEnds(HERMES), CallEnds(HERMES)
    whole.feed(text)
    for i in range(0, len(text), 3):
        pieces.feed(text[i:i + 3])
    assert whole.candidates() == pieces.candidates() and whole.pending() == pieces.pending()


# ---- through the stopper -----------------------------------------------------------------------------
CONSTRAINT = ToolCallConstraint("hermes", (WEATHER,), "auto")
GRAMMAR = StructuredOutputs(json_object=True)   # any grammar: the stopper only needs to know there is one


def run(tokens: list[str], rd: RepetitionDetection):
    """Feed word tokens (one id per distinct text); returns (termination, streamed text, final text, stopper)."""
    stop = SequenceStopper(SamplingParams(max_tokens=500, tool_calls=CONSTRAINT, structured_outputs=GRAMMAR,
                                          repetition_detection=rd), frozenset({0}), {}, 5, 4096)
    ids: dict[str, int] = {}
    streamed, term = "", None
    for t in tokens:
        term = stop.on_token(ids.setdefault(t, len(ids) + 1), t)
        if term is not None:
            break
        streamed += stop.release()
    streamed += stop.finish(term)
    return term, streamed, stop.text, stop


def call_tokens(city: list[str]) -> list[str]:
    return ["<tool_call>", "\n", '{"name": "', "get_weather", '", "arguments": {"city": "', *city, '"}}', "\n",
            "</tool_call>", "\n"]


def test_an_exact_loop_in_the_fifth_call_keeps_the_four_complete_calls() -> None:
    cities = ["Paris", "London", "Berlin", "Madrid"]
    tokens = [t for c in cities for t in call_tokens([c])] + call_tokens(["la"] * 40)
    term, streamed, text, _ = run(tokens, RepetitionDetection(near_loops=False))
    assert term.reason is Reason.TOOL_LOOP and "period 1 repeated" in term.detail, term
    assert "inside a run of tool calls" in term.detail and "4 kept" in term.detail
    assert text == "\n".join(call(c) for c in cities) and streamed == text       # nothing retracted
    assert term.char_offset == len(text)
    settled = CONSTRAINT.settle(term, text)
    assert settled.finish_reason == "tool_calls" and settled.reason is Reason.TOOL_LOOP
    assert [c.name for c in CONSTRAINT.parse(text).calls] == ["get_weather"] * 4


def test_a_near_loop_after_one_complete_call_keeps_it() -> None:
    # a city that grows instead of repeating: no fixed period, the near-loop detector fires
    grow = [w for n in range(1, 12) for w in ["per", "square", "km"][: 1 + n % 3]]
    tokens = call_tokens(["Paris"]) + call_tokens(grow)
    rd = RepetitionDetection(min_repeats=4096, near_loop_ngram=2, near_loop_window=16)
    term, streamed, text, stop = run(tokens, rd)
    assert term.reason is Reason.TOOL_LOOP and "near-loop detector" in term.detail, term
    assert text == call("Paris") and streamed == text
    assert stop.num_output_tokens_kept == len(call_tokens(["Paris"])) - 1     # the cut's "\n" is dropped
    assert CONSTRAINT.settle(term, text).finish_reason == "tool_calls"


def test_bare_bodies_are_cut_inside_the_token_that_ends_one() -> None:
    """Qwen2.5-Coder-0.5B's own shape (the agents case): bare `{"name": ...}` bodies, `"}}\n` one token."""
    bare = [['{"name": "', "get_weather", '", "arguments": {"city": "', c, '"}}\n'] for c in ("Paris", "London")]
    tokens = [t for b in bare for t in b] + ['{"name": "', "get_weather", '", "arguments": {"city": "'] + ["la"] * 40
    term, streamed, text, stop = run(tokens, RepetitionDetection(near_loops=False))
    assert term.reason is Reason.TOOL_LOOP and "2 kept" in term.detail, term
    assert text == HEAD + 'Paris"}}\n' + HEAD + 'London"}}' and streamed == text
    assert stop.num_output_tokens_kept == 10                 # the token "}}\n" counts; its "\n" is cut
    assert CONSTRAINT.settle(term, text).finish_reason == "tool_calls"


def test_a_loop_in_the_first_call_is_still_a_repetition_cut() -> None:
    term, _, text, _ = run(call_tokens(["la"] * 40), RepetitionDetection(near_loops=False))
    assert term.reason is Reason.REPETITION and text.startswith("<tool_call>")
    assert CONSTRAINT.settle(term, text).finish_reason == "length"


def test_a_loop_in_content_after_the_calls_keeps_todays_rule() -> None:
    tokens = call_tokens(["Paris"]) + ["Done", "."] + ["la"] * 40
    term, _, text, _ = run(tokens, RepetitionDetection(near_loops=False))
    assert term.reason is Reason.REPETITION and text.startswith(call("Paris") + "\nDone.")
