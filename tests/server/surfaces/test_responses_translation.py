"""OpenAI Responses <-> the OpenAI chat shape: input items, stateless refusals, text.format, the events."""
from __future__ import annotations

import json

import pytest

from haltwise.sampling_params import ParamError
from haltwise.server.chat_core import ChatDelta, ChatResult
from haltwise.server.surfaces.openai_responses import ResponseBuilder, ResponseEvents
from haltwise.server.surfaces.openai_responses_protocol import ResponsesRequest
from haltwise.stopping.termination import Reason, Termination

TOOL = {"type": "function", "name": "get_weather", "description": "Weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}


def request(**kw) -> ResponsesRequest:
    return ResponsesRequest.model_validate({"model": "m", **kw})


def test_input_items_become_the_openai_chat_shape() -> None:
    body = request(instructions="Be brief.", tools=[TOOL], tool_choice={"type": "function", "name": "get_weather"},
                   input=[{"role": "developer", "content": "Use tools."},
                          {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Paris?"}]},
                          {"type": "function_call", "call_id": "call_1", "name": "get_weather",
                           "arguments": '{"city": "Paris"}'},
                          {"type": "function_call_output", "call_id": "call_1", "output": "18C"}])
    turn = body.to_turn()
    assert turn.messages == [{"role": "system", "content": "Be brief."}, {"role": "system", "content": "Use tools."},
                             {"role": "user", "content": "Paris?"},
                             {"role": "assistant", "content": None, "tool_calls": [CALL]},
                             {"role": "tool", "tool_call_id": "call_1", "content": "18C"}]
    assert turn.tools[0]["function"]["parameters"] == TOOL["parameters"]
    assert turn.tool_choice == {"type": "function", "function": {"name": "get_weather"}}
    assert request(input="hi").to_turn().messages == [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize("field", [{"store": True}, {"previous_response_id": "resp_1"}, {"conversation": "c"},
                                   {"background": True}])
def test_stateful_requests_say_the_server_is_stateless(field) -> None:
    with pytest.raises(ParamError, match="stateless") as e:
        request(input="hi", **field).to_turn()
    assert e.value.param == next(iter(field))
    request(input="hi", store=False).to_turn()   # store false is what a stateless server does anyway


def test_text_format_uses_the_structured_output_path() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    p = request(input="x", text={"format": {"type": "json_schema", "name": "t", "schema": schema}}).to_turn().params
    assert p.structured_outputs is not None
    with pytest.raises(ParamError) as e:
        request(input="x", text={"format": {"type": "json_schema", "name": "t", "schema": {"type": "array"}}}).to_turn()
    assert e.value.param == "text.format"
    assert request(input="x", text={"format": {"type": "text"}}).to_turn().params.structured_outputs is None


def final(text: str, reason: Reason, tool_calls=None) -> ChatResult:
    return ChatResult(text=text, termination=Termination(reason), prompt_tokens=5, completion_tokens=4,
                      tool_calls=tool_calls)


@pytest.mark.parametrize("res", [final("Hello", Reason.MAX_TOKENS), final("", Reason.EOS),
                                 final("Sure.", Reason.EOS, tool_calls=[CALL]), final("", Reason.EOS, tool_calls=[CALL])])
def test_stream_events_build_the_same_response(res: ChatResult) -> None:
    b = ResponseBuilder(request(input="x"), "m")
    ev = ResponseEvents(b)
    deltas = [ChatDelta(text=res.text[:2]), ChatDelta(text=res.text[2:])]
    if res.tool_calls:
        deltas += [ChatDelta(tool_calls=[{"index": 0, "id": "call_1", "function": {"name": "get_weather"}}]),
                   ChatDelta(tool_calls=[{"index": 0, "function": {"arguments": '{"city": '}}]),
                   ChatDelta(tool_calls=[{"index": 0, "function": {"arguments": '"Paris"}'}}])]
    deltas.append(ChatDelta(result=res))
    events = ev.start() + [e for d in deltas for e in ev.delta(d)]
    assert [e["sequence_number"] for _, e in events] == list(range(len(events)))
    done = events[-1][1]["response"]
    assert done == b.final(res)
    assert events[-1][0] == ("response.incomplete" if res.termination.reason is Reason.MAX_TOKENS
                             else "response.completed")
    items = [e["item"] for n, e in events if n == "response.output_item.done"]
    assert items == done["output"]
    text = "".join(e["delta"] for n, e in events if n == "response.output_text.delta")
    assert text == res.text == done["output_text"]
    args = "".join(e["delta"] for n, e in events if n == "response.function_call_arguments.delta")
    if res.tool_calls:
        assert json.loads(args) == {"city": "Paris"} and done["output"][-1]["call_id"] == "call_1"


def test_incomplete_details() -> None:
    b = ResponseBuilder(request(input="x", max_output_tokens=4), "m")
    r = b.final(final("abcd", Reason.MAX_TOKENS))
    assert (r["status"], r["incomplete_details"]) == ("incomplete", {"reason": "max_output_tokens"})
    assert r["output"][0]["status"] == "incomplete" and r["termination"]["reason"] == "max_tokens"
    assert r["usage"]["total_tokens"] == 9
    ok = b.final(final("abc", Reason.EOS))
    assert (ok["status"], ok["incomplete_details"]) == ("completed", None)


def test_tools_reach_the_template_in_the_chat_shape() -> None:
    """strict kept, no description invented: the same tools block as the chat route for the same tools."""
    tools = request(input="x", tools=[{**TOOL, "strict": True}, {"type": "function", "name": "f",
                                                                 "parameters": {"type": "object"}}]).chat_tools()
    assert tools[0]["function"]["strict"] is True and tools[0]["function"]["description"] == TOOL["description"]
    assert tools[1]["function"] == {"name": "f", "parameters": {"type": "object"}}
