"""Anthropic Messages <-> the OpenAI chat shape: requests, tool blocks, the response body and the event sequence."""
from __future__ import annotations

import json

import pytest

from haltwise.sampling_params import ParamError
from haltwise.server.chat_core import ChatDelta, ChatResult
from haltwise.server.surfaces.anthropic_messages import MessageEvents, message_body, tool_use_blocks
from haltwise.server.surfaces.anthropic_protocol import MessagesRequest
from haltwise.stopping.termination import Reason, Termination
from haltwise.tokenizer.tiny import tiny_tokenizer

WEATHER = {"name": "get_weather", "description": "Weather of a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}


def request(**kw) -> MessagesRequest:
    return MessagesRequest.model_validate({"model": "m", "max_tokens": 16, **kw})


def test_tool_round_trip_becomes_the_openai_chat_shape() -> None:
    body = request(system=[{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Use tools."}],
                   tools=[WEATHER], tool_choice={"type": "tool", "name": "get_weather"}, messages=[
                       {"role": "user", "content": "Weather in Paris?"},
                       {"role": "assistant", "content": [
                           {"type": "text", "text": "Let me look."},
                           {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}}]},
                       {"role": "user", "content": [
                           {"type": "tool_result", "tool_use_id": "call_1", "content": "18C, sunny"},
                           {"type": "text", "text": "Thanks"}]}])
    turn = body.to_turn()
    assert turn.messages == [
        {"role": "system", "content": "Be brief.\nUse tools."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "Let me look.", "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18C, sunny"},
        {"role": "user", "content": "Thanks"}]
    assert turn.tools == [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                                            "parameters": WEATHER["input_schema"]}}]
    assert turn.tool_choice == {"type": "function", "function": {"name": "get_weather"}}
    assert (turn.params.max_tokens, turn.params.stop) == (16, ())


@pytest.mark.parametrize("choice,expected", [({"type": "auto"}, "auto"), ({"type": "any"}, "required"),
                                             ({"type": "none"}, "none")])
def test_tool_choice_words(choice, expected) -> None:
    assert request(messages=[{"role": "user", "content": "x"}], tools=[WEATHER], tool_choice=choice).to_turn() \
        .tool_choice == expected


def test_bad_tool_requests_are_param_errors() -> None:
    with pytest.raises(ParamError):
        request(messages=[{"role": "user", "content": "x"}], tools=[WEATHER],
                tool_choice={"type": "tool", "name": "nope"}).to_turn()
    with pytest.raises(ParamError, match="greater than thinking.budget_tokens"):   # as Anthropic: budget < max_tokens
        request(messages=[{"role": "user", "content": "x"}], thinking={"type": "enabled", "budget_tokens": 64}).to_turn()

    def parallel(choice: dict) -> bool | None:
        return request(messages=[{"role": "user", "content": "x"}], tools=[WEATHER], tool_choice=choice) \
            .to_turn().parallel_tool_calls

    assert parallel({"type": "any", "disable_parallel_tool_use": True}) is False
    assert parallel({"type": "auto", "disable_parallel_tool_use": False}) is True
    assert parallel({"type": "auto"}) is None


def test_stop_sequences_and_sampling() -> None:
    p = request(messages=[{"role": "user", "content": "x"}], stop_sequences=["\n\n", "END"], temperature=0.0,
                top_k=5, top_p=0.9).to_turn().params
    assert (p.stop, p.temperature, p.top_k, p.top_p) == (("\n\n", "END"), 0.0, 5, 0.9)


def result(text: str, reason: Reason, tool_calls=None, **kw) -> ChatResult:
    return ChatResult(text=text, termination=Termination(reason, **kw), prompt_tokens=7, completion_tokens=3,
                      cached_tokens=5, cached_by_tier={"pool": 1, "ram": 4, "disk": 0}, tool_calls=tool_calls)


def test_message_body_maps_the_record() -> None:
    tok = tiny_tokenizer()
    body = message_body("msg_1", "m", result("Hi", Reason.STOP_STRING, stop_reason="END"), tok)
    assert body["content"] == [{"type": "text", "text": "Hi"}]
    assert (body["stop_reason"], body["stop_sequence"]) == ("stop_sequence", "END")
    assert body["usage"] == {"input_tokens": 7, "output_tokens": 3, "cache_creation_input_tokens": 0,
                             "cache_read_input_tokens": 5, "prompt_cache": {"pool": 1, "ram": 4, "disk": 0}}
    assert body["termination"]["reason"] == "stop_string" and body["termination"]["layer"] == "business"
    tools = message_body("msg_2", "m", result("", Reason.EOS, tool_calls=[CALL]), tok)
    assert tools["content"] == tool_use_blocks([CALL]) == [
        {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}}]
    assert tools["stop_reason"] == "tool_use"
    token = message_body("msg_3", "m", result("Hi", Reason.STOP_TOKEN, stop_reason=2), tok)
    assert (token["stop_reason"], token["stop_sequence"]) == ("stop_sequence", "<|im_end|>")


def test_event_sequence_text_then_tool_use_blocks() -> None:
    ev = MessageEvents("msg_1", "m", 7, tiny_tokenizer())
    final = result("Let me look.", Reason.EOS, tool_calls=[CALL])
    deltas = [ChatDelta(text="Let me "), ChatDelta(text="look."),
              ChatDelta(tool_calls=[{"index": 0, "id": "call_1", "type": "function",
                                     "function": {"name": "get_weather", "arguments": ""}}]),
              ChatDelta(tool_calls=[{"index": 0, "function": {"arguments": '{"city": '}}]),
              ChatDelta(tool_calls=[{"index": 0, "function": {"arguments": '"Paris"}'}}], result=final)]
    events = ev.start() + [e for d in deltas for e in ev.delta(d)]
    names = [n for n, _ in events]
    assert names == ["message_start", "ping", "content_block_start", "content_block_delta", "content_block_delta",
                     "content_block_stop", "content_block_start", "content_block_delta", "content_block_delta",
                     "content_block_stop", "message_delta", "message_stop"]
    assert [e["index"] for n, e in events if n.startswith("content_block_")] == [0, 0, 0, 0, 1, 1, 1, 1]
    text = "".join(e["delta"]["text"] for n, e in events if n == "content_block_delta" and e["index"] == 0)
    args = "".join(e["delta"]["partial_json"] for n, e in events if n == "content_block_delta" and e["index"] == 1)
    assert text == final.text and json.loads(args) == {"city": "Paris"}
    delta = events[-2][1]
    assert delta["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    assert delta["usage"]["output_tokens"] == 3 and delta["usage"]["cache_read_input_tokens"] == 5
    assert delta["termination"]["reason"] == "eos"


def _replay(events: list) -> list[dict]:
    """The content blocks a client assembles from the events (as the SDK's stream accumulator does)."""
    blocks: list[dict] = []
    for name, e in events:
        if name == "content_block_start":
            assert e["index"] == len(blocks)
            blocks.append({**e["content_block"], **({"partial": ""} if e["content_block"]["type"] == "tool_use" else {})})
        elif name == "content_block_delta":
            block = blocks[e["index"]]
            if e["delta"]["type"] == "text_delta":
                block["text"] += e["delta"]["text"]
            else:
                block["partial"] += e["delta"]["partial_json"]
    for b in blocks:
        if b["type"] == "tool_use":
            b["input"] = json.loads(b.pop("partial") or "{}")
    return blocks


@pytest.mark.parametrize("res", [result("Hi there", Reason.EOS), result("", Reason.MAX_TOKENS),
                                 result("", Reason.EOS, tool_calls=[CALL]), result("Sure.", Reason.EOS, tool_calls=[CALL])])
def test_streamed_blocks_equal_the_body(res: ChatResult) -> None:
    tok = tiny_tokenizer()
    ev = MessageEvents("msg_1", "m", 7, tok)
    deltas = [ChatDelta(text=res.text[:2]), ChatDelta(text=res.text[2:])]
    if res.tool_calls:
        deltas += [ChatDelta(tool_calls=[{"index": 0, "id": "call_1", "function": {"name": "get_weather"}}]),
                   ChatDelta(tool_calls=[{"index": 0, "function": {"arguments": CALL["function"]["arguments"]}}])]
    events = ev.start() + [e for d in deltas + [ChatDelta(result=res)] for e in ev.delta(d)]
    starts = [e["index"] for n, e in events if n == "content_block_start"]
    stops = [e["index"] for n, e in events if n == "content_block_stop"]
    assert starts == stops == list(range(len(starts)))
    assert _replay(events) == message_body("msg_1", "m", res, tok)["content"]


def test_tool_call_arguments_reach_the_template_as_objects() -> None:
    from haltwise.server.chat_prompt import for_template

    msgs = request(messages=[{"role": "user", "content": "x"}, {"role": "assistant", "content": [
        {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}}]}]).to_turn().messages
    assert msgs[1]["tool_calls"][0]["function"]["arguments"] == '{"city": "Paris"}'   # OpenAI shape: a string
    assert for_template(msgs)[1]["tool_calls"][0]["function"]["arguments"] == {"city": "Paris"}
    odd = [{"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "not json"}}]}]
    assert for_template(odd) == odd and for_template(msgs[:1]) == msgs[:1]
