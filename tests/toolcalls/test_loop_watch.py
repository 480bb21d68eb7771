"""Tool loops: a call repeated after its result (or within one answer) is withheld, before any of it streams."""
from __future__ import annotations

import json

from haltwise.sampling_params import SamplingParams
from haltwise.stopping.sequence_stopper import SequenceStopper
from haltwise.stopping.termination import Reason
from haltwise.toolcalls.constraint import ToolCallConstraint
from haltwise.toolcalls.formats.hermes import HERMES
from haltwise.toolcalls.loop_watch import ToolLoopWatch, answered_calls, call_key
from haltwise.toolcalls.spec import ToolSpec

WEATHER = ToolSpec("get_weather", None, json.dumps({"type": "object", "properties": {"city": {"type": "string"}}}))
HISTORY = [
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "18C"},
]


def call(args: str, name: str = "get_weather") -> str:
    return f'<tool_call>\n{{"name": "{name}", "arguments": {args}}}\n</tool_call>'


def test_answered_calls_are_normalised_and_need_a_tool_result() -> None:
    assert answered_calls(HISTORY) == {("get_weather", '{"city":"Paris"}')}
    assert answered_calls(HISTORY[:2]) == frozenset()              # no result yet: not answered
    assert call_key("f", '{"b": 1, "a": 2}') == call_key("f", {"a": 2, "b": 1})


def feed(watch: ToolLoopWatch, text: str, step: int = 3):
    """Feed in small pieces; returns (matches, the most text ever released: fed - pending)."""
    matches, released, fed = [], 0, 0
    for i in range(0, len(text), step):
        piece = text[i:i + step]
        matches += watch.feed(piece)
        fed += len(piece)
        if matches:
            break
        released = max(released, fed - watch.pending())
    return matches, released


def test_a_repeated_call_fires_at_its_section_start_and_none_of_it_was_released() -> None:
    text = "Again: " + call('{"city": "Paris"}')
    matches, released = feed(ToolLoopWatch(HERMES, answered_calls(HISTORY)), text)
    assert len(matches) == 1 and matches[0].preset == "tool_loop"
    assert matches[0].start == text.index("<tool_call>") and released <= matches[0].start
    assert "already answered" in matches[0].stop


def test_other_arguments_and_other_tools_are_not_loops() -> None:
    watch = ToolLoopWatch(HERMES, answered_calls(HISTORY))
    assert feed(watch, call('{"city": "Rome"}') + "\n" + call("{}", "get_time"))[0] == []


def test_the_same_call_twice_in_one_answer_fires_on_the_second() -> None:
    text = call('{"city": "Rome"}') + "\n" + call('{"city": "Rome"}')
    matches, _ = feed(ToolLoopWatch(HERMES, frozenset()), text)
    assert len(matches) == 1 and matches[0].start == text.index("<tool_call>", 5)


def test_the_stopper_ends_with_tool_loop_and_settles_truthfully() -> None:
    constraint = ToolCallConstraint("hermes", (WEATHER,), "auto", answered_calls(HISTORY))
    stop = SequenceStopper(SamplingParams(max_tokens=200, tool_calls=constraint), frozenset({0}), {}, 5, 4096)
    text = "Let me check. " + call('{"city": "Paris"}')
    term = None
    for i in range(0, len(text), 4):
        term = stop.on_token(i + 10, text[i:i + 4])
        if term is not None:
            break
    stop.finish(term)
    assert term.reason is Reason.TOOL_LOOP and stop.text == "Let me check. "
    settled = constraint.settle(term, stop.text)
    assert settled.reason is Reason.TOOL_LOOP and settled.finish_reason == "stop"
    # a first, new call before the repeat: the answer keeps it and says tool_calls
    both = call('{"city": "Rome"}') + "\n"
    assert constraint.settle(term, both + "").finish_reason == "tool_calls"
