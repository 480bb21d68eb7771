"""Request fields the agent SDKs send by default (docs/agents.md's audit), on the tiny model's server:
Messages `thread` refused the way the anthropic SDK reads (its tool runner then goes on without a thread),
Messages `output_config.format` honoured as a structured output, and an openai SDK answer appended back to
the history (parsed, refusal, annotations) accepted and not shown to the model."""
from __future__ import annotations

import json

import anthropic
import httpx
import openai
import pytest

from haltwise.sampling_params import ParamError
from haltwise.server.surfaces.anthropic_protocol import MessagesRequest

ASK = [{"role": "user", "content": "Hello there"}]
FLAG = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
        "additionalProperties": False}


def claude(url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key="x", max_retries=0, timeout=60)


def test_thread_is_refused_with_the_details_the_sdk_reads(tiny_server) -> None:
    r = httpx.post(tiny_server.url + "/v1/messages", json={"model": "tiny", "max_tokens": 4, "messages": ASK,
                                                            "thread": {"type": "create"}})
    assert r.status_code == 400 and r.json()["type"] == "error"
    assert r.json()["error"]["details"] == {"error_code": "thread_unsupported_request", "unsupported": ["thread"]}


def test_the_sdks_tool_runner_goes_on_without_a_thread(tiny_server) -> None:
    @anthropic.beta_tool
    def get_weather(city: str) -> str:
        """Get the current weather in a city."""
        return "18 degrees"

    runner = claude(tiny_server.url).beta.messages.tool_runner(
        model="tiny", max_tokens=8, tools=[get_weather], max_iterations=2, messages=ASK,
        extra_body={"temperature": 0})
    assert runner.until_done().type == "message"


def test_output_config_format_is_a_structured_output(tiny_server) -> None:
    r = claude(tiny_server.url).messages.create(model="tiny", max_tokens=48, messages=ASK, extra_body={
        "temperature": 0, "output_config": {"format": {"type": "json_schema", "schema": FLAG}}})
    assert r.stop_reason == "end_turn" and isinstance(json.loads(r.content[0].text)["ok"], bool)
    broken = {"format": {"type": "json_schema", "schema": {"type": "object", "properties": 3}}}
    bad = httpx.post(tiny_server.url + "/v1/messages", json={"model": "tiny", "max_tokens": 4, "messages": ASK,
                                                              "output_config": broken})
    assert bad.status_code == 400 and bad.json()["type"] == "error"


def test_output_config_checks() -> None:
    def turn(config: dict):
        return MessagesRequest.model_validate({"model": "m", "max_tokens": 8, "messages": ASK,
                                               "output_config": config}).to_turn()

    assert turn({"format": {"type": "json_schema", "schema": FLAG}}).params.structured_outputs is not None
    assert turn({}).params.structured_outputs is None
    with pytest.raises(ParamError) as e:
        turn({"effort": "high"})
    assert e.value.param == "output_config.effort"


def test_an_answer_appended_back_is_accepted_and_not_shown(tiny_server) -> None:
    """The openai SDK's parse() answer appended as the docs do: parsed, refusal and annotations ride along."""
    oai = openai.OpenAI(base_url=tiny_server.url + "/v1", api_key="x", max_retries=0, timeout=60)
    plain = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"},
             {"role": "user", "content": "Again"}]
    echoed = [plain[0], {**plain[1], "parsed": None, "refusal": None, "annotations": [], "audio": None,
                         "function_call": None}, plain[2]]
    counts = [oai.chat.completions.create(model="tiny", messages=m, max_tokens=1).usage.prompt_tokens
              for m in (plain, echoed)]
    assert counts[0] == counts[1]
