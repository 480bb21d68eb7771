"""Reasoning on every surface, through the official clients, against a real server on the scripted tiny
qwen3 model (tests/engine/tiny_qwen3.py: real Qwen3 template, a model that reasons on cue).

chat completions: message.reasoning_content / delta.reasoning_content (vLLM's names);
/v1/messages: thinking blocks (signature = sha256 digest of the text) and thinking_delta events;
/v1/responses: a reasoning item (reasoning_text content) and response.reasoning_text.delta events.
Streamed and non-streamed answers are the same on each surface; expected texts come from the script.
"""
from __future__ import annotations

import hashlib
from typing import Iterator

import anthropic
import httpx
import openai
import pytest

from haltwise.engine.async_engine import AsyncEngine
from haltwise.server.app import build_app
from tests.engine.tiny_qwen3 import SCRIPTS, tiny_qwen3_engine
from tests.server.http_helpers import ServerThread

SPLIT = SCRIPTS["split"]


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with ServerThread(build_app(AsyncEngine(tiny_qwen3_engine(max_model_len=1024)), "tiny")) as server:
        yield server.url


def oai(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=60)


def claude(url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key="x", max_retries=0, timeout=60)


def ask(cue: str) -> list[dict]:
    return [{"role": "user", "content": cue}]


def chat(url: str, cue: str, **kw):
    return oai(url).chat.completions.create(model="tiny", messages=ask(cue), max_tokens=120, **kw)


def chat_stream(url: str, cue: str, **kw) -> tuple[str, str, list]:
    chunks = list(chat(url, cue, stream=True, **kw))
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    reasoning = "".join((d.model_extra or {}).get("reasoning_content") or "" for d in deltas)
    return reasoning, "".join(d.content or "" for d in deltas), chunks


# ---- chat completions --------------------------------------------------------------------------------------
def test_chat_splits_reasoning_streamed_and_not(url) -> None:
    r = chat(url, "split")
    msg = r.choices[0].message
    assert (msg.model_extra["reasoning_content"], msg.content) == (SPLIT.reasoning, SPLIT.answer)
    assert r.choices[0].finish_reason == "stop"
    reasoning_tokens = r.usage.completion_tokens_details.reasoning_tokens
    assert 0 < reasoning_tokens < r.usage.completion_tokens
    reasoning, content, chunks = chat_stream(url, "split")
    assert (reasoning, content) == (SPLIT.reasoning, SPLIT.answer)
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert chunks[-1].choices[0].model_extra["termination"] == r.choices[0].model_extra["termination"]


def test_chat_non_reasoning_turn_has_no_reasoning_field(url) -> None:
    msg = chat(url, "plain").choices[0].message
    assert msg.content == SCRIPTS["plain"].answer and "reasoning_content" not in (msg.model_extra or {})


@pytest.mark.parametrize("extra", [{"max_reasoning_tokens": 4}, {"reasoning_effort": "none"},
                                   {"chat_template_kwargs": {"enable_thinking": False}}])
def test_chat_budget_and_switches(url, extra) -> None:
    r = chat(url, "long", extra_body=extra)
    msg, t = r.choices[0].message, r.choices[0].model_extra["termination"]
    assert msg.content == SCRIPTS["long"].answer and t["reason"] == "eos"
    reasoning = (msg.model_extra or {}).get("reasoning_content") or ""
    if "max_reasoning_tokens" in extra:
        assert reasoning and SCRIPTS["long"].reasoning.startswith(reasoning) and reasoning != SCRIPTS["long"].reasoning
        assert r.usage.completion_tokens_details.reasoning_tokens == 4
        assert "the reasoning budget of 4 tokens was spent" in t["detail"]
    else:
        assert reasoning == ""          # enable_thinking false: the prompt holds a closed, empty section


def test_chat_stop_acts_on_the_answer_only_streamed_and_not(url) -> None:
    script = SCRIPTS["stop"]
    r = chat(url, "stop", stop=["STOP"])
    msg = r.choices[0].message
    assert msg.model_extra["reasoning_content"] == script.reasoning
    assert msg.content == script.answer[:script.answer.index("STOP")]
    assert r.choices[0].model_extra["stop_reason"] == "STOP"
    reasoning, content, _ = chat_stream(url, "stop", stop=["STOP"])
    assert (reasoning, content) == (script.reasoning, msg.content)


def test_chat_grammar_applies_to_the_answer_only(url) -> None:
    r = chat(url, "grammar", extra_body={"structured_outputs": {"choice": ["yes", "no"]}})
    msg = r.choices[0].message
    assert msg.model_extra["reasoning_content"] == SCRIPTS["grammar"].reasoning and msg.content in ("yes", "no")
    assert r.choices[0].model_extra["termination"]["reason"] == "grammar"


def test_chat_loop_in_reasoning_ends_the_reasoning(url) -> None:
    r = chat(url, "loop")
    msg, t = r.choices[0].message, r.choices[0].model_extra["termination"]
    assert msg.content == SCRIPTS["loop"].answer and "a loop inside the reasoning" in t["detail"]


@pytest.mark.parametrize("extra, param", [
    ({"reasoning_effort": "extreme"}, "reasoning_effort"),
    ({"max_reasoning_tokens": -1}, "max_reasoning_tokens"),
    ({"chat_template_kwargs": {"add_generation_prompt": False}}, "chat_template_kwargs"),
    ({"chat_template_kwargs": {"enable_thinking": "no"}}, "chat_template_kwargs"),
])
def test_chat_bad_reasoning_settings_are_400(url, extra, param) -> None:
    with pytest.raises(openai.BadRequestError) as e:
        chat(url, "split", extra_body=extra)
    assert e.value.status_code == 400 and param in (e.value.body.get("param") or "")


# ---- Anthropic Messages -------------------------------------------------------------------------------------
def test_messages_thinking_blocks_streamed_and_not(url) -> None:
    ask_ = dict(model="tiny", max_tokens=120, messages=ask("long"), thinking={"type": "enabled", "budget_tokens": 5})
    msg = claude(url).messages.create(**ask_)
    thinking, text = msg.content
    assert thinking.type == "thinking" and SCRIPTS["long"].reasoning.startswith(thinking.thinking)
    assert thinking.signature == "sha256:" + hashlib.sha256(thinking.thinking.encode()).hexdigest()
    assert text.type == "text" and text.text == SCRIPTS["long"].answer and msg.stop_reason == "end_turn"
    assert "the reasoning budget of 5 tokens was spent" in msg.model_extra["termination"]["detail"]
    with claude(url).messages.stream(**ask_) as s:
        events = list(s)
        final = s.get_final_message()
    kinds = [e.delta.type for e in events if e.type == "content_block_delta"]
    assert kinds.index("signature_delta") < kinds.index("text_delta") and "thinking_delta" in kinds
    assert [b.model_dump() for b in final.content] == [b.model_dump() for b in msg.content]
    # the thinking block goes back in history: accepted, and the conversation renders
    follow = claude(url).messages.create(model="tiny", max_tokens=60, messages=[
        *ask("long"), {"role": "assistant", "content": [thinking.model_dump(), text.model_dump()]}, *ask("split")])
    assert follow.content[-1].text == SPLIT.answer


def test_messages_thinking_disabled_and_default(url) -> None:
    off = claude(url).messages.create(model="tiny", max_tokens=60, messages=ask("split"), thinking={"type": "disabled"})
    assert [b.type for b in off.content] == ["text"] and off.content[0].text == SPLIT.answer
    default = claude(url).messages.create(model="tiny", max_tokens=60, messages=ask("split"))
    assert [b.type for b in default.content] == ["thinking", "text"] and default.content[0].thinking == SPLIT.reasoning
    assert claude(url).messages.count_tokens(model="tiny", messages=ask("split"), thinking={"type": "disabled"}
                                             ).input_tokens > claude(url).messages.count_tokens(
        model="tiny", messages=ask("split")).input_tokens      # the closed empty section is in the prompt


@pytest.mark.parametrize("thinking", [{"type": "enabled"}, {"type": "enabled", "budget_tokens": 60}])
def test_messages_bad_thinking_is_an_anthropic_400(url, thinking) -> None:
    r = httpx.post(url + "/v1/messages", json={"model": "tiny", "max_tokens": 60, "messages": ask("split"),
                                               "thinking": thinking}, timeout=60)
    assert r.status_code == 400 and r.json()["type"] == "error"
    assert r.json()["error"]["type"] == "invalid_request_error" and "budget_tokens" in r.json()["error"]["message"]


# ---- OpenAI Responses ---------------------------------------------------------------------------------------
def test_responses_reasoning_item_streamed_and_not(url) -> None:
    r = oai(url).responses.create(model="tiny", input="split", reasoning={"effort": "low"}, max_output_tokens=120)
    reasoning, message = r.output
    assert reasoning.type == "reasoning" and reasoning.content[0].text == SPLIT.reasoning and reasoning.summary == []
    assert message.type == "message" and r.output_text == SPLIT.answer and r.status == "completed"
    assert 0 < r.usage.output_tokens_details.reasoning_tokens < r.usage.output_tokens
    with oai(url).responses.stream(model="tiny", input="split", reasoning={"effort": "low"},
                                   max_output_tokens=120) as s:
        events = list(s)
        final = s.get_final_response()
    deltas = [e.delta for e in events if e.type == "response.reasoning_text.delta"]
    assert "".join(deltas) == SPLIT.reasoning
    done = [e for e in events if e.type == "response.reasoning_text.done"]
    assert len(done) == 1 and done[0].text == SPLIT.reasoning and done[0].output_index == 0
    assert [e.output_index for e in events if e.type == "response.output_text.delta"][0] == 1
    assert final.output[0].model_dump(exclude={"id"}) == reasoning.model_dump(exclude={"id"})
    assert [o.type for o in final.output] == ["reasoning", "message"] and final.output_text == r.output_text


def test_responses_reasoning_cut_by_budget_and_items_sent_back(url) -> None:
    r = oai(url).responses.create(model="tiny", input="long", max_output_tokens=120,
                                  extra_body={"max_reasoning_tokens": 2})
    assert r.usage.output_tokens_details.reasoning_tokens == 2 and r.output_text == SCRIPTS["long"].answer
    assert "budget of 2 tokens" in r.model_extra["termination"]["detail"]
    again = oai(url).responses.create(model="tiny", max_output_tokens=60, input=[
        {"role": "user", "content": "long"}, *[o.model_dump(exclude_none=True) for o in r.output],
        {"role": "user", "content": "plain"}])
    assert again.output_text == SCRIPTS["plain"].answer


def test_chat_template_kwargs_cannot_break_the_template(url) -> None:
    for kwargs in ({"namespace": 1}, {"raise_exception": "x"}):      # Qwen3's template calls namespace()
        with pytest.raises(openai.BadRequestError) as e:
            chat(url, "split", extra_body={"chat_template_kwargs": kwargs})
        assert e.value.body.get("param") == "chat_template_kwargs"


def test_tool_call_grammar_applies_to_the_answer_only(url) -> None:
    """tool_choice required: the call grammar constrains the answer; the reasoning before it stays free text."""
    params = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    r = chat(url, "split", seed=1, tool_choice="required",
             tools=[{"type": "function", "function": {"name": "pick", "description": "pick", "parameters": params}}])
    choice = r.choices[0]
    assert choice.message.model_extra["reasoning_content"] == SPLIT.reasoning
    assert choice.finish_reason in ("tool_calls", "length")     # random weights may run out of max_tokens
    if choice.finish_reason == "tool_calls":
        assert choice.message.tool_calls[0].function.name == "pick" and not choice.message.content
    msg = claude(url).messages.create(model="tiny", max_tokens=120, messages=ask("split"), tool_choice={"type": "any"},
                                      tools=[{"name": "pick", "description": "pick", "input_schema": params}],
                                      thinking={"type": "enabled", "budget_tokens": 4}, extra_body={"seed": 1})
    assert msg.content[0].type == "thinking" and SPLIT.reasoning.startswith(msg.content[0].thinking)
    assert [b.type for b in msg.content[1:]] == ["tool_use"] or msg.stop_reason == "max_tokens"
