"""Harmony calls (gpt-oss) through the tool-call layer: recipient + arguments -> the message's tool_calls, the
same from any split of the stream; the settle rule; the forced tool_choice refused."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from haltwise.sampling_params import SamplingParams
from haltwise.stopping.termination import Reason, Termination
from haltwise.structured.spec import StructuredOutputs
from haltwise.toolcalls import ToolError, parse_tool_request, plan_tool_calls
from haltwise.toolcalls.constraint import ToolCallConstraint
from haltwise.toolcalls.formats.harmony import HARMONY, answer_text, call_name, call_text
from haltwise.toolcalls.formats.registry import format_for_template
from haltwise.toolcalls.response import ToolDeltaStream, chat_message
from haltwise.toolcalls.spec import ToolSpec

TOOL = ToolSpec("get_weather", "", '{"properties": {"city": {"type": "string"}}, "type": "object"}')
HARMONY_CALLS = ToolCallConstraint("harmony", (TOOL,), "auto")
ARGS, TO = '{"city": "Paris"}', "functions.get_weather"


def test_recipients_that_name_a_function() -> None:
    assert call_name(TO) == "get_weather"
    assert [call_name(r) for r in (None, "browser.search", "functions.", "assistant")] == [None] * 4
    assert answer_text(None, ARGS) is None and answer_text("browser.search", ARGS) is None
    assert call_text(TO, ARGS) == '<|message|>{"name": "get_weather", "arguments": {"city": "Paris"}}<|call|>'


def test_a_function_recipient_makes_the_answer_a_call() -> None:
    message = chat_message(HARMONY_CALLS, ARGS, "r", 0, TO)
    assert message["content"] is None
    assert [c["function"] for c in message["tool_calls"]] == [{"name": "get_weather", "arguments": ARGS}]


def test_without_a_function_recipient_the_answer_is_content_as_written() -> None:
    text = 'See <|message|>{"name": "get_weather", "arguments": {}}<|call|>'   # text, never parsed
    assert chat_message(HARMONY_CALLS, text, "r", 0, None) == {"role": "assistant", "content": text}
    assert chat_message(HARMONY_CALLS, ARGS, "r", 0, "browser.search")["content"] == ARGS


@settings(max_examples=100, deadline=None)
@given(cuts=st.lists(st.integers(0, len(ARGS)), max_size=5), recipient=st.sampled_from([TO, None]))
def test_any_split_of_the_stream_gives_the_non_streamed_message(cuts, recipient) -> None:
    stream, at, deltas = ToolDeltaStream(HARMONY_CALLS, "r", 0), 0, []
    for cut in sorted(cuts) + [len(ARGS)]:
        deltas += stream.feed(ARGS[at:cut], recipient)
        at = cut
    deltas += stream.finish()
    whole = chat_message(HARMONY_CALLS, ARGS, "r", 0, recipient)
    assert "".join(d.get("content") or "" for d in deltas) == (whole["content"] or "")
    calls = [c for d in deltas for c in d.get("tool_calls", ())]
    assert "".join(c["function"]["arguments"] for c in calls) == "".join(
        c["function"]["arguments"] for c in whole.get("tool_calls", ()))
    assert [c["id"] for c in calls if "id" in c] == [c["id"] for c in whole.get("tool_calls", ())]


def test_settle_a_finished_call_or_a_cut_one() -> None:
    eos = Termination(Reason.EOS, "the model ended its turn")
    assert HARMONY_CALLS.settle(eos, call_text(TO, ARGS)).reason is Reason.TOOL_CALL
    cut = Termination(Reason.MAX_TOKENS, "max_tokens")
    assert HARMONY_CALLS.settle(cut, call_text(TO, ARGS[:-3])).structure_incomplete
    bad = ToolCallConstraint("harmony", (TOOL,), "auto").settle(eos, call_text("functions.nope", ARGS))
    assert bad.structure_incomplete and "undeclared tool" in bad.detail


class _Tok:
    chat_template = type("T", (), {"source": '{{ "<|start|>assistant to=" }}{{ "functions." }}{{ "<|call|>" }}'})()


def test_the_gpt_oss_template_picks_harmony_which_takes_auto_only() -> None:
    assert format_for_template(_Tok.chat_template.source) is HARMONY and HARMONY.marker_texts == ()
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": TOOL.schema}}]
    plan = plan_tool_calls(parse_tool_request(tools, "auto", None), _Tok())
    assert plan is not None and plan.structure is None and plan.constraint.format_name == "harmony"
    params = plan.apply(SamplingParams(max_tokens=8))
    assert params.tool_calls == plan.constraint and params.structured_outputs is None
    with pytest.raises(ToolError):          # a structured answer and tool calls: a 400, as for other formats
        plan.apply(SamplingParams(max_tokens=8, structured_outputs=StructuredOutputs(choice=["a"])))
    for choice in ("required", {"type": "function", "function": {"name": "get_weather"}}):
        with pytest.raises(ToolError) as e:
            plan_tool_calls(parse_tool_request(tools, choice, None), _Tok())
        assert e.value.param == "tool_choice"
