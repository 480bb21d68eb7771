"""Structured outputs over HTTP: the real openai client against the real server (tiny random model)."""
from __future__ import annotations

import json

import httpx
import jsonschema
import openai
import pytest

from tests.structured.invalid_corpus import INVALID_GRAMMARS, INVALID_REGEXES, INVALID_SCHEMAS

MSG = [{"role": "user", "content": "Give me a person as JSON."}]
PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 6},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 120}},
          "required": ["name", "age"], "additionalProperties": False}


def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)


def schema_format(schema: dict, name: str = "person") -> dict:
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}


def test_chat_json_schema_ends_when_the_object_closes(tiny_server) -> None:
    r = client(tiny_server).chat.completions.create(model="tiny", messages=MSG, temperature=0, max_tokens=120,
                                                    response_format=schema_format(PERSON))
    choice = r.choices[0]
    t = choice.model_extra["termination"]
    assert choice.finish_reason == "stop" and t["reason"] == "grammar" and t["layer"] == "business"
    assert "json_schema 'person'" in t["detail"]
    jsonschema.validate(json.loads(choice.message.content), PERSON)


def test_json_object_on_completions_route(tiny_server) -> None:
    r = client(tiny_server).completions.create(model="tiny", prompt="JSON:", temperature=0, max_tokens=200,
                                               extra_body={"response_format": {"type": "json_object"}})
    choice = r.choices[0]
    reason = choice.model_extra["termination"]["reason"]
    if reason == "grammar":
        assert isinstance(json.loads(choice.text), dict)
    else:   # the loop detector stays on under a grammar (a random model loops inside a string)
        assert reason in ("max_tokens", "repetition") and choice.text.startswith("{")


@pytest.mark.parametrize("extra, check", [
    ({"structured_outputs": {"regex": "[0-9]{3}-[a-z]{2}"}}, lambda s: len(s) == 6 and s[3] == "-"),
    ({"structured_outputs": {"choice": ["red", "green", "blue"]}}, lambda s: s in ("red", "green", "blue")),
    ({"guided_choice": ["up", "down"]}, lambda s: s in ("up", "down")),
    ({"guided_regex": "(yes|no)"}, lambda s: s in ("yes", "no")),
    ({"guided_json": PERSON}, lambda s: jsonschema.validate(json.loads(s), PERSON) is None),
    ({"structured_outputs": {"grammar": 'start: "a" b\nb: "x" | "y"'}}, lambda s: s in ("ax", "ay")),
    ({"structured_outputs": {"grammar": 'root ::= "z" ("0" | "1")'}}, lambda s: s in ("z0", "z1")),
])
def test_vllm_spellings(tiny_server, extra: dict, check) -> None:
    r = client(tiny_server).chat.completions.create(model="tiny", messages=MSG, temperature=0.9, seed=1,
                                                    max_tokens=120, extra_body=extra)
    choice = r.choices[0]
    assert choice.finish_reason == "stop" and choice.model_extra["termination"]["reason"] == "grammar"
    assert check(choice.message.content), choice.message.content


def _bodies() -> list[tuple[dict, str]]:
    out = [({"response_format": schema_format(s if isinstance(s, dict) and s.get("type") == "object"
                                              else {"type": "object", "properties": {"a": s}, "required": ["a"]})},
            "response_format.json_schema.schema") for s, _ in INVALID_SCHEMAS]
    out += [({"structured_outputs": {"regex": r}}, "structured_outputs.regex") for r in INVALID_REGEXES]
    out += [({"guided_grammar": g}, "guided_grammar") for g in INVALID_GRAMMARS]
    out += [({"response_format": schema_format({"type": "array"})}, "response_format.json_schema.schema"),
            ({"response_format": {"type": "json_schema", "json_schema": {"name": "bad name!", "schema": PERSON}}},
             "response_format.json_schema.name"),
            ({"structured_outputs": {"regex": "a", "choice": ["a"]}}, "structured_outputs"),
            ({"guided_regex": "a", "guided_choice": ["a"]}, "guided_choice"),
            ({"response_format": {"type": "json_object"}, "guided_regex": "a"}, "guided_regex"),
            ({"guided_json": {"type": "object", "properties": {"a": {"type": "string"}}}, "stop": ["x"],
              "response_format": {"type": "json_schema"}}, "guided_json")]
    return out


@pytest.mark.parametrize("extra, param", _bodies())
def test_invalid_constraints_are_400_with_param_and_the_next_request_is_served(tiny_server, extra, param) -> None:
    body = {"model": "tiny", "messages": MSG, "max_tokens": 4, **extra}
    r = httpx.post(tiny_server.url + "/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and err["param"] == param and err["message"]
    ok = httpx.post(tiny_server.url + "/v1/chat/completions", timeout=60,
                    json={"model": "tiny", "messages": MSG, "max_tokens": 4, "guided_choice": ["fine"]})
    assert ok.status_code == 200 and ok.json()["choices"][0]["message"]["content"] == "fine"


@pytest.mark.parametrize("extra", [
    {"min_tokens": 50},
    {"n": 3, "temperature": 1.0, "seed": 4},
    {"logprobs": True, "top_logprobs": 3},
    {"stop": ["a", "\""]},
    {"stop_presets": ["json", "line"]},
    {"repetition_detection": {"max_period": 2, "min_repeats": 2, "min_tokens": 2}},
])
def test_combinations_never_5xx(tiny_server, extra: dict) -> None:
    body = {"model": "tiny", "messages": MSG, "max_tokens": 60, "temperature": 0,
            "response_format": schema_format(PERSON), **extra}
    r = httpx.post(tiny_server.url + "/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    for choice in r.json()["choices"]:
        assert choice["finish_reason"] in ("stop", "length")
        if choice["termination"]["reason"] == "grammar":
            jsonschema.validate(json.loads(choice["message"]["content"]), PERSON)


@pytest.mark.parametrize("extra", [{"response_format": schema_format(PERSON)},
                                   {"structured_outputs": {"regex": "[a-z ]{5,40}\\."}, "stop": ["e"]}])
def test_streaming_equals_non_streaming(tiny_server, extra: dict) -> None:
    c = client(tiny_server)
    kw = dict(model="tiny", messages=MSG, temperature=0.7, seed=7, max_tokens=80)
    whole = c.chat.completions.create(**kw, extra_body=extra)
    chunks = list(c.chat.completions.create(**kw, extra_body=extra, stream=True))
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == whole.choices[0].message.content
    finals = [ch.choices[0] for ch in chunks if ch.choices and ch.choices[0].finish_reason]
    assert finals[-1].finish_reason == whole.choices[0].finish_reason
