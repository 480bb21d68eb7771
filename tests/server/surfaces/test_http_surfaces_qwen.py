"""`haltwise serve --model qwen2.5-coder-0.5b` (default flags) as a black box, through the official
`anthropic` and `openai` clients: /v1/messages and /v1/responses against /v1/chat/completions.

Expected texts are derived at run time from the same server (greedy), never hard-coded: the default
kernel path may change, the contract "same request, same tokens" does not.
"""
from __future__ import annotations

import json
from typing import Iterator

import anthropic
import httpx
import openai
import pytest

from tests.models.real_models import real_model_path
from tests.server.browser_helpers import serve

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]  # the first start measures the kernel plan (minutes on a fresh 2-core host)

GREEDY = {"temperature": 0.0}
SKY = [{"role": "user", "content": "What color is the sky on a clear day? One word."}]
CODE = [{"role": "user", "content": "Write a Python function that adds two numbers."}]
SYSTEM = "You are terse."


@pytest.fixture(scope="module")
def qwen() -> Iterator[str]:
    real_model_path("qwen2.5-coder-0.5b")
    yield from serve("--model", "qwen2.5-coder-0.5b", start_limit=1500.0)


@pytest.fixture(scope="module")
def name(qwen: str) -> str:
    return httpx.get(qwen + "/v1/models").json()["data"][0]["id"]


def claude(url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key="x", max_retries=0, timeout=600)


def oai(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=600)


def test_system_and_same_tokens_on_all_three_surfaces(qwen, name) -> None:
    ref = oai(qwen).chat.completions.create(model=name, messages=[{"role": "system", "content": SYSTEM}, *SKY],
                                            max_tokens=8, temperature=0)
    msg = claude(qwen).messages.create(model=name, system=SYSTEM, messages=SKY, max_tokens=8, extra_body=GREEDY)
    resp = oai(qwen).responses.create(model=name, instructions=SYSTEM, input=SKY[0]["content"], max_output_tokens=8,
                                      temperature=0)
    text, t = ref.choices[0].message.content, ref.choices[0].model_extra["termination"]
    assert text and msg.content[0].text == text and resp.output_text == text
    assert msg.model_extra["termination"] == t == resp.model_extra["termination"]
    assert msg.usage.input_tokens == ref.usage.prompt_tokens == resp.usage.input_tokens
    assert msg.usage.output_tokens == ref.usage.completion_tokens == resp.usage.output_tokens
    complete = ref.choices[0].finish_reason == "stop"
    assert msg.stop_reason == ("end_turn" if complete else "max_tokens")
    assert resp.status == ("completed" if complete else "incomplete")
    count = claude(qwen).messages.count_tokens(model=name, system=SYSTEM, messages=SKY)
    assert count.input_tokens == msg.usage.input_tokens


def test_max_tokens_reads_as_cut(qwen, name) -> None:
    msg = claude(qwen).messages.create(model=name, messages=CODE, max_tokens=3, extra_body=GREEDY)
    assert msg.stop_reason == "max_tokens" and msg.usage.output_tokens == 3
    resp = oai(qwen).responses.create(model=name, input=CODE[0]["content"], max_output_tokens=3, temperature=0)
    assert resp.status == "incomplete" and resp.incomplete_details.reason == "max_output_tokens"
    assert resp.output_text == msg.content[0].text


def test_stop_sequence_exact_cut_streamed_equals_nonstreamed(qwen, name) -> None:
    free = claude(qwen).messages.create(model=name, messages=CODE, max_tokens=16,
                                        extra_body={**GREEDY, "ignore_eos": True}).content[0].text
    stop = next(free[i:i + 3] for i in range(len(free) // 3, len(free) - 2) if free[i:i + 3].strip())
    expected = free[:free.index(stop)]
    ask = dict(model=name, messages=CODE, max_tokens=16, stop_sequences=[stop], extra_body={**GREEDY, "ignore_eos": True})
    msg = claude(qwen).messages.create(**ask)
    assert msg.content[0].text == expected and (msg.stop_reason, msg.stop_sequence) == ("stop_sequence", stop)
    with claude(qwen).messages.stream(**ask) as s:
        deltas = [e.delta.text for e in s if e.type == "content_block_delta"]
        final = s.get_final_message()
    assert "".join(deltas) == expected and (final.stop_reason, final.stop_sequence) == ("stop_sequence", stop)
    # Responses (haltwise's `stop` extra): the same cut, streamed and not
    rask = dict(model=name, input=CODE[0]["content"], max_output_tokens=16, temperature=0,
                extra_body={"ignore_eos": True, "stop": [stop]})
    resp = oai(qwen).responses.create(**rask)
    events = list(oai(qwen).responses.create(**rask, stream=True))
    streamed = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert resp.output_text == expected == streamed and resp.status == "completed"
    assert events[-1].type == "response.completed" and events[-1].response.model_extra["termination"]["reason"] == "stop_string"


def test_stream_equals_nonstream_without_stops(qwen, name) -> None:
    full = claude(qwen).messages.create(model=name, messages=SKY, max_tokens=10, extra_body=GREEDY)
    with claude(qwen).messages.stream(model=name, messages=SKY, max_tokens=10, extra_body=GREEDY) as s:
        text = "".join(e.delta.text for e in s if e.type == "content_block_delta")
        final = s.get_final_message()
    assert text == full.content[0].text and final.stop_reason == full.stop_reason
    resp = oai(qwen).responses.create(model=name, input=SKY[0]["content"], max_output_tokens=10, temperature=0)
    events = list(oai(qwen).responses.create(model=name, input=SKY[0]["content"], max_output_tokens=10,
                                             temperature=0, stream=True))
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == resp.output_text == text


def test_tool_history_renders_through_qwens_template(qwen, name) -> None:
    """A conversation that carries a tool call and its result (no tools offered) is served on both surfaces."""
    msgs = [{"role": "user", "content": "What is the weather in Paris?"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "call_1", "name": "get_weather",
                                               "input": {"city": "Paris"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "18C, sunny"}]}]
    msg = claude(qwen).messages.create(model=name, messages=msgs, max_tokens=12, extra_body=GREEDY)
    items = [{"role": "user", "content": msgs[0]["content"]},
             {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris"}'},
             {"type": "function_call_output", "call_id": "call_1", "output": "18C, sunny"}]
    resp = oai(qwen).responses.create(model=name, input=items, max_output_tokens=12, temperature=0)
    assert msg.content[0].text == resp.output_text and msg.usage.input_tokens == resp.usage.input_tokens
    plain = claude(qwen).messages.count_tokens(model=name, messages=msgs[:1])
    assert msg.usage.input_tokens > plain.input_tokens + 10   # the call and its result are in the prompt


WEATHER_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"},
                                                   "unit": {"enum": ["celsius", "fahrenheit"]}},
                  "required": ["city"]}
ASK_WEATHER = "What is the weather in Paris right now? Use the tool."


def test_tool_use_round_trips_on_both_surfaces(qwen, name) -> None:
    """auto: the model calls get_weather on each surface (the same call as on chat completions, streamed
    or not); the tool's answer sent back (tool_choice none: this model otherwise calls again) gives a text
    answer that ends by itself, the same tokens on both surfaces."""
    chat = oai(qwen).chat.completions.create(
        model=name, messages=[{"role": "user", "content": ASK_WEATHER}], max_tokens=60, temperature=0,
        tools=[{"type": "function", "function": {"name": "get_weather", "description": "Current weather",
                                                 "parameters": WEATHER_SCHEMA}}]).choices[0]
    assert chat.finish_reason == "tool_calls", chat
    (ref,) = [(c.function.name, json.loads(c.function.arguments)) for c in chat.message.tool_calls]
    tools = [{"name": "get_weather", "description": "Current weather", "input_schema": WEATHER_SCHEMA}]
    ask = dict(model=name, messages=[{"role": "user", "content": ASK_WEATHER}], max_tokens=60, tools=tools,
               extra_body=GREEDY)
    msg = claude(qwen).messages.create(**ask)
    (use,) = [b for b in msg.content if b.type == "tool_use"]
    assert msg.stop_reason == "tool_use" and (use.name, use.input) == ref
    with claude(qwen).messages.stream(**ask) as s:
        final = s.get_final_message()
    assert [(b.name, b.input) for b in final.content if b.type == "tool_use"] == [ref]
    history = [*ask["messages"], {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in msg.content]},
               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                             "content": "18 degrees celsius, sunny"}]}]
    answer = claude(qwen).messages.create(**{**ask, "messages": history, "tool_choice": {"type": "none"}})
    assert answer.stop_reason == "end_turn" and "18" in answer.content[0].text
    rtools = [{"type": "function", "name": "get_weather", "description": "Current weather", "parameters": WEATHER_SCHEMA}]
    rask = dict(model=name, input=ASK_WEATHER, tools=rtools, max_output_tokens=60, temperature=0)
    resp = oai(qwen).responses.create(**rask)
    (call,) = [it for it in resp.output if it.type == "function_call"]
    assert resp.status == "completed" and (call.name, json.loads(call.arguments)) == ref
    events = list(oai(qwen).responses.create(**rask, stream=True))
    assert [(it.name, it.arguments) for it in events[-1].response.output if it.type == "function_call"] == \
        [(call.name, call.arguments)]
    follow = oai(qwen).responses.create(**{**rask, "tool_choice": "none", "input": [
        {"role": "user", "content": ASK_WEATHER},
        {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
        {"type": "function_call_output", "call_id": call.call_id, "output": "18 degrees celsius, sunny"}]})
    assert follow.status == "completed" and "18" in follow.output_text
    assert follow.output_text == answer.content[0].text      # the same conversation, the same tokens


def test_errors_in_each_surfaces_shape(qwen, name) -> None:
    with pytest.raises(anthropic.BadRequestError) as e:
        claude(qwen).messages.create(model=name, messages=[], max_tokens=4)
    assert e.value.body["type"] == "error" and e.value.body["error"]["type"] == "invalid_request_error"
    with pytest.raises(anthropic.NotFoundError):
        claude(qwen).messages.create(model="nope", messages=SKY, max_tokens=4)
    with pytest.raises(openai.BadRequestError) as e:
        oai(qwen).responses.create(model=name, input="x", previous_response_id="resp_1")
    assert e.value.body["param"] == "previous_response_id" and "stateless" in e.value.body["message"]
    with pytest.raises(openai.BadRequestError) as e:
        oai(qwen).responses.create(model=name, input="x", max_output_tokens=0)
    assert e.value.body["param"] == "max_output_tokens"
    assert claude(qwen).messages.create(model=name, messages=SKY, max_tokens=2, extra_body=GREEDY).type == "message"
