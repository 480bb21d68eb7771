"""Phi-4-mini tool calls through the official clients, against a real server on the phi3 fixture (Phi-4-mini's shape,
its real chat template and tool tokens, converted by llama.cpp; tests/models/converted.py). The random weights call
a tool when the call grammar makes them (tool_choice required / named / Anthropic "any"): the engine writes
`<|tool_call|>[{"name": ..., "arguments": {...}}]<|/tool_call|>` with Phi-4-mini's special tokens, and the answer
comes back as tool_calls / tool_use, streamed as not. The tools reach the model in the system message, the call
and its result go back through the template as the model writes them (exact prompt tokens).
"""
from __future__ import annotations

import json
from typing import Iterator

import anthropic
import openai
import pytest

from haltwise.config import EngineConfig
from haltwise.engine.async_engine import AsyncEngine
from haltwise.engine.factory import build_engine
from haltwise.server.app import build_app
from tests.models.converted import fixture, require_converter
from tests.server.http_helpers import ServerThread

PARAMS = {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris"]}}, "required": ["city"],
          "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city.",
                                           "parameters": PARAMS}}]
ARGS = '{"city": "Paris"}'
ASK = [{"role": "user", "content": "Weather in Paris?"}]


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[str, object]]:
    require_converter()
    engine = build_engine(fixture("phi3").gguf("q8_0"), EngineConfig(kv_cache_memory=16 * 2**20, max_model_len=512))
    with ServerThread(build_app(AsyncEngine(engine), "phi4")) as server:
        yield server.url, engine.tokenizer


def oai(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=300)


def chat(url: str, messages: list[dict], **kw):
    return oai(url).chat.completions.create(model="phi4", messages=messages,
                                            **{"max_tokens": 40, "temperature": 0, **kw})


def prompt_ids(url: str, messages: list[dict], **kw) -> list[int]:
    """The prompt's token ids after the first, as the server encoded them (vLLM's prompt_logprobs)."""
    r = chat(url, messages, max_tokens=1, extra_body={"prompt_logprobs": 0}, **kw)
    return [int(next(iter(entry))) for entry in r.model_extra["prompt_logprobs"][1:]]


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_weather"}}])
def test_a_call_comes_back_as_tool_calls_streamed_and_not(served, choice) -> None:
    url, _ = served
    r = chat(url, ASK, tools=TOOLS, tool_choice=choice, parallel_tool_calls=False)
    msg = r.choices[0].message
    assert msg.content is None and r.choices[0].finish_reason == "tool_calls"
    assert [(c.function.name, c.function.arguments) for c in msg.tool_calls] == [("get_weather", ARGS)]
    chunks = list(chat(url, ASK, tools=TOOLS, tool_choice=choice, parallel_tool_calls=False, stream=True))
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    calls = [c for d in deltas for c in d.tool_calls or ()]
    assert "".join(d.content or "" for d in deltas) == ""          # no call markup leaks into the content
    assert [c.function.name for c in calls if c.function.name] == ["get_weather"]
    assert "".join(c.function.arguments or "" for c in calls) == ARGS
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_the_tools_reach_the_model_in_the_system_message(served) -> None:
    url, tok = served
    listed = json.dumps([TOOLS[0]["function"]])
    want = f"<|system|>Be brief.<|tool|>{listed}<|/tool|><|end|><|user|>Weather in Paris?<|end|><|assistant|>"
    system = [{"role": "system", "content": "Be brief."}, *ASK]
    assert prompt_ids(url, system, tools=TOOLS) == tok.encode(want, add_special_tokens=False)[1:]
    bare = f"<|system|><|tool|>{listed}<|/tool|><|end|><|user|>Weather in Paris?<|end|><|assistant|>"
    assert prompt_ids(url, ASK, tools=TOOLS) == tok.encode(bare, add_special_tokens=False)[1:]
    assert prompt_ids(url, ASK, tools=TOOLS, tool_choice="none") == tok.encode(
        "<|user|>Weather in Paris?<|end|><|assistant|>", add_special_tokens=False)[1:]


def test_the_call_and_its_result_go_back_as_the_model_writes_them(served) -> None:
    url, tok = served
    first = chat(url, ASK, tools=TOOLS, tool_choice="required", parallel_tool_calls=False).choices[0].message
    history = [*ASK, {"role": "assistant", "content": None, "tool_calls": [first.tool_calls[0].model_dump()]},
               {"role": "tool", "tool_call_id": first.tool_calls[0].id, "content": "sunny"}]
    want = (f"<|user|>Weather in Paris?<|end|><|assistant|><|tool_call|>[{{\"name\": \"get_weather\", \"arguments\": "
            f"{ARGS}}}]<|/tool_call|><|end|><|tool|>sunny<|end|><|assistant|>")
    assert prompt_ids(url, history) == tok.encode(want, add_special_tokens=False)[1:]
    r = chat(url, history, tools=TOOLS, tool_choice="none")
    assert r.choices[0].message.tool_calls is None and r.choices[0].finish_reason in ("stop", "length")


def test_messages_tool_use_round_trip_streamed_and_not(served) -> None:
    url, _ = served
    client = anthropic.Anthropic(base_url=url, api_key="x", max_retries=0, timeout=300)
    ask = dict(model="phi4", max_tokens=40, messages=ASK,
               tool_choice={"type": "any", "disable_parallel_tool_use": True},
               tools=[{"name": "get_weather", "description": "The weather in a city.", "input_schema": PARAMS}])
    msg = client.messages.create(**ask)
    (use,) = msg.content
    assert (use.type, use.name, use.input, msg.stop_reason) == ("tool_use", "get_weather", {"city": "Paris"},
                                                                "tool_use")
    with client.messages.stream(**ask) as s:
        list(s)
        final = s.get_final_message()
    assert [b.model_dump(exclude={"id"}) for b in final.content] == [b.model_dump(exclude={"id"}) for b in msg.content]
    back = client.messages.create(**{**ask, "tool_choice": {"type": "none"}, "messages": [
        *ASK, {"role": "assistant", "content": [use.model_dump(exclude_none=True)]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "sunny"}]}]})
    assert [b.type for b in back.content] in (["text"], [])


@pytest.mark.parametrize("n", [6, 10, 14, 18])
def test_a_cut_call_is_max_tokens_never_tool_use(served, n) -> None:
    """A call cut by max_tokens (before or inside its arguments) is Anthropic's max_tokens (its block kept,
    input {} and the partial JSON) and OpenAI's length: a parsed name must not make a cut answer a finished call."""
    url, _ = served
    client = anthropic.Anthropic(base_url=url, api_key="x", max_retries=0, timeout=300)
    ask = dict(model="phi4", max_tokens=n, messages=ASK, tool_choice={"type": "any"},
               tools=[{"name": "get_weather", "description": "The weather in a city.", "input_schema": PARAMS}])
    msg = client.messages.create(**ask)
    assert msg.stop_reason == "max_tokens" and "incomplete" in msg.model_extra["termination"]["detail"], msg
    with client.messages.stream(**ask) as s:
        final = s.get_final_message()
    assert final.stop_reason == "max_tokens"
    assert chat(url, ASK, max_tokens=n, tools=TOOLS, tool_choice="required").choices[0].finish_reason == "length"
