"""gpt-oss's harmony channels on every chat surface, through the official clients, against a real server on the
tiny gpt-oss fixture answering in harmony on cue (tests/engine/scripted_gpt_oss.py: llama.cpp-converted GGUF,
the real gpt-oss template, the real engine; a logit bias steers the random weights).

analysis -> reasoning_content / thinking blocks / a reasoning item; final -> content; a commentary message
to=functions.NAME -> tool_calls / tool_use. Streamed and non-streamed answers are the same; stop strings act on
the content only; the conversation sent back (reasoning, calls, tool results) renders as the template expects.
"""
from __future__ import annotations

import json
from typing import Iterator

import anthropic
import openai
import pytest

from haltwise.engine.async_engine import AsyncEngine
from haltwise.server.app import build_app
from tests.engine.scripted_gpt_oss import (AFTER_ANSWER, AFTER_THINK, ANSWER, THINK, WEATHER_ARGS, WEATHER_THINK,
                                           scripted_gpt_oss_engine)
from tests.models.converted import require_converter
from tests.server.http_helpers import ServerThread

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city.",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                          "required": ["city"]}}}]
CLAUDE_TOOLS = [{"name": "get_weather", "description": "The weather in a city.",
                 "input_schema": TOOLS[0]["function"]["parameters"]}]


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[str, object]]:
    require_converter()
    engine = scripted_gpt_oss_engine()
    with ServerThread(build_app(AsyncEngine(engine), "gpt-oss")) as server:
        yield server.url, engine.tokenizer


@pytest.fixture(scope="module")
def url(served) -> str:
    return served[0]


def oai(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=300)


def claude(url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key="x", max_retries=0, timeout=300)


def ask(cue: str) -> list[dict]:
    return [{"role": "user", "content": cue}]


def chat(url: str, messages: list[dict], **kw):
    return oai(url).chat.completions.create(model="gpt-oss", messages=messages,
                                            **{"max_tokens": 160, "temperature": 0, **kw})


def streamed(url: str, messages: list[dict], **kw) -> tuple[str, str, dict, list]:
    """(reasoning, content, {index: [name, arguments]}, chunks) assembled from a streamed chat answer."""
    chunks = list(chat(url, messages, stream=True, **kw))
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    calls: dict[int, list[str]] = {}
    for d in deltas:
        for c in d.tool_calls or ():
            entry = calls.setdefault(c.index, ["", ""])
            entry[0] += (c.function.name or "") if c.function else ""
            entry[1] += (c.function.arguments or "") if c.function else ""
    reasoning = "".join((d.model_extra or {}).get("reasoning_content") or "" for d in deltas)
    return reasoning, "".join(d.content or "" for d in deltas), calls, chunks


# ---- chat completions --------------------------------------------------------------------------------------
def test_analysis_is_reasoning_and_final_is_content_streamed_and_not(url) -> None:
    r = chat(url, ask("hello"))
    msg, choice = r.choices[0].message, r.choices[0]
    assert (msg.model_extra["reasoning_content"], msg.content) == (THINK, ANSWER)
    assert choice.finish_reason == "stop" and choice.model_extra["termination"]["reason"] == "eos"
    assert 0 < r.usage.completion_tokens_details.reasoning_tokens < r.usage.completion_tokens
    reasoning, content, calls, chunks = streamed(url, ask("hello"))
    assert (reasoning, content, calls) == (THINK, ANSWER, {})
    assert chunks[-1].choices[0].model_extra["termination"] == choice.model_extra["termination"]


def test_a_reply_without_analysis_has_no_reasoning(url) -> None:
    msg = chat(url, ask("direct")).choices[0].message
    assert msg.content == ANSWER and "reasoning_content" not in (msg.model_extra or {})


def test_stop_strings_match_in_the_content_not_the_analysis(url) -> None:
    r = chat(url, ask("hello"), stop=["STOP"])
    msg, choice = r.choices[0].message, r.choices[0]
    assert msg.model_extra["reasoning_content"] == THINK                     # "STOP" in there did not stop it
    assert msg.content == ANSWER[:ANSWER.index("STOP")] and choice.model_extra["stop_reason"] == "STOP"
    t = choice.model_extra["termination"]
    assert t["reason"] == "stop_string" and t["char_offset"] == len(msg.content)
    reasoning, content, _, chunks = streamed(url, ask("hello"), stop=["STOP"])
    assert (reasoning, content) == (THINK, msg.content)
    assert chunks[-1].choices[0].model_extra["termination"] == t


def test_a_grammar_waits_through_the_headers_for_the_final_body(url) -> None:
    r = chat(url, ask("hello"), extra_body={"structured_outputs": {"choice": ["yes", "no"]}})
    msg = r.choices[0].message
    assert msg.model_extra["reasoning_content"] == THINK and msg.content in ("yes", "no")
    assert r.choices[0].model_extra["termination"]["reason"] == "grammar"


def test_the_reasoning_budget_forces_end_and_the_reply_goes_on(url) -> None:
    r = chat(url, ask("hello"), extra_body={"max_reasoning_tokens": 3})
    msg, t = r.choices[0].message, r.choices[0].model_extra["termination"]
    assert THINK.startswith(msg.model_extra["reasoning_content"]) and msg.model_extra["reasoning_content"] != THINK
    assert r.usage.completion_tokens_details.reasoning_tokens == 3 and msg.content == ANSWER
    assert "the reasoning budget of 3 tokens was spent" in t["detail"]


def test_a_commentary_call_is_a_tool_call_streamed_and_not(url) -> None:
    r = chat(url, ask("weather"), tools=TOOLS)
    msg, choice = r.choices[0].message, r.choices[0]
    assert msg.model_extra["reasoning_content"] == WEATHER_THINK and msg.content is None
    (tool_call,) = msg.tool_calls
    assert (tool_call.function.name, tool_call.function.arguments) == ("get_weather", WEATHER_ARGS)
    assert choice.finish_reason == "tool_calls" and choice.model_extra["termination"]["reason"] == "tool_call"
    reasoning, content, calls, chunks = streamed(url, ask("weather"), tools=TOOLS)
    assert (reasoning, content, calls) == (WEATHER_THINK, "", {0: ["get_weather", WEATHER_ARGS]})
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    ids = [c.id for ch in chunks if ch.choices for c in ch.choices[0].delta.tool_calls or () if c.id]
    assert len(ids) == 1 and ids[0].startswith("call_")       # one call, named once (ids follow the response id)


def test_the_call_and_its_result_go_back_through_the_template(served) -> None:
    url, tok = served
    first = chat(url, ask("weather"), tools=TOOLS).choices[0].message
    history = [*ask("weather"), {"role": "assistant", "content": None, "tool_calls": [first.tool_calls[0].model_dump()],
                                 "reasoning_content": first.model_extra["reasoning_content"]},
               {"role": "tool", "tool_call_id": first.tool_calls[0].id, "content": "sunny"}]
    r = chat(url, history, tools=TOOLS)
    msg = r.choices[0].message
    assert (msg.model_extra["reasoning_content"], msg.content, msg.tool_calls) == (AFTER_THINK, AFTER_ANSWER, None)
    # what the template expects: thinking (analysis), the call's arguments as an object, the tool's text
    rendered = tok.apply_chat_template([*ask("weather"), {"role": "assistant", "content": "", "thinking": WEATHER_THINK,
                                        "tool_calls": [{"type": "function", "function": {
                                            "name": "get_weather", "arguments": json.loads(WEATHER_ARGS)}}]},
                                        {"role": "tool", "content": "sunny"}], tools=TOOLS)
    assert analysis_and_call(WEATHER_THINK) in rendered and '<|start|>functions.get_weather to=assistant' in rendered
    assert prompt_ids(url, history, tools=TOOLS) == tok.encode(rendered, add_special_tokens=False)[1:]


def test_reasoning_effort_reaches_the_template(served) -> None:
    url, tok = served
    low = tok.decode(prompt_ids(url, ask("hello"), reasoning_effort="low"), skip_special_tokens=False)
    assert "Reasoning: low" in low and "Reasoning: medium" in tok.decode(prompt_ids(url, ask("hello")),
                                                                        skip_special_tokens=False)


def prompt_ids(url: str, messages: list[dict], **kw) -> list[int]:
    """The prompt's token ids after the first, as the server encoded them (vLLM's prompt_logprobs)."""
    r = chat(url, messages, max_tokens=1, extra_body={"prompt_logprobs": 0}, **kw)
    return [int(next(iter(entry))) for entry in r.model_extra["prompt_logprobs"][1:]]


def analysis_and_call(think: str) -> str:
    return (f"<|start|>assistant<|channel|>analysis<|message|>{think}<|end|><|start|>assistant to=functions."
            f'get_weather<|channel|>commentary json<|message|>{{"city": "Paris"}}<|call|>')


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_weather"}}])
def test_forced_tool_choice_is_a_400_naming_why(url, choice) -> None:
    with pytest.raises(openai.BadRequestError) as e:
        chat(url, ask("weather"), tools=TOOLS, tool_choice=choice)
    assert e.value.body.get("param") == "tool_choice" and "harmony" in e.value.body["message"]


# ---- Anthropic Messages -------------------------------------------------------------------------------------
def test_messages_thinking_and_text_streamed_and_not(url) -> None:
    ask_ = dict(model="gpt-oss", max_tokens=160, messages=ask("hello"))
    msg = claude(url).messages.create(**ask_)
    assert [(b.type, getattr(b, "thinking", None) or getattr(b, "text", None)) for b in msg.content] == [
        ("thinking", THINK), ("text", ANSWER)]
    assert msg.stop_reason == "end_turn"
    with claude(url).messages.stream(**ask_) as s:
        list(s)
        final = s.get_final_message()
    assert [b.model_dump() for b in final.content] == [b.model_dump() for b in msg.content]


def test_messages_tool_use_round_trip_streamed_and_not(url) -> None:
    ask_ = dict(model="gpt-oss", max_tokens=160, messages=ask("weather"), tools=CLAUDE_TOOLS)
    msg = claude(url).messages.create(**ask_)
    thinking, use = msg.content
    assert (thinking.type, thinking.thinking) == ("thinking", WEATHER_THINK)
    assert (use.type, use.name, use.input, msg.stop_reason) == ("tool_use", "get_weather", json.loads(WEATHER_ARGS),
                                                                "tool_use")
    with claude(url).messages.stream(**ask_) as s:
        list(s)
        final = s.get_final_message()
    assert [b.model_dump(exclude={"id"}) for b in final.content] == [b.model_dump(exclude={"id"}) for b in msg.content]
    back = claude(url).messages.create(model="gpt-oss", max_tokens=160, tools=CLAUDE_TOOLS, messages=[
        *ask("weather"), {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in msg.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "sunny"}]}])
    assert [(b.type, getattr(b, "thinking", None) or getattr(b, "text", None)) for b in back.content] == [
        ("thinking", AFTER_THINK), ("text", AFTER_ANSWER)]


# ---- OpenAI Responses ---------------------------------------------------------------------------------------
def test_responses_reasoning_item_and_function_call(url) -> None:
    r = oai(url).responses.create(model="gpt-oss", input="hello", max_output_tokens=160)
    assert [o.type for o in r.output] == ["reasoning", "message"]
    assert r.output[0].content[0].text == THINK and r.output_text == ANSWER
    r = oai(url).responses.create(model="gpt-oss", input="weather", max_output_tokens=160, tools=[
        {"type": "function", **TOOLS[0]["function"]}])
    assert [o.type for o in r.output] == ["reasoning", "function_call"]
    assert (r.output[1].name, r.output[1].arguments) == ("get_weather", WEATHER_ARGS)
