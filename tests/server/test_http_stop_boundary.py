"""stop_boundary and stop_presets "auto" over HTTP: the real openai client against the real server (tiny model)."""
from __future__ import annotations

import re

import httpx
import openai
import pytest

MSG = [{"role": "user", "content": "Return a JSON object with a key a."}]


def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)


def whole_word(stop: str) -> str:
    left = r"(?<!\w)" if re.match(r"\w", stop[0]) else ""
    right = r"(?!\w)" if re.match(r"\w", stop[-1]) else ""
    return left + re.escape(stop) + right


@pytest.mark.parametrize("route, body", [
    ("/v1/completions", {"prompt": "x"}),
    ("/v1/chat/completions", {"messages": MSG}),
])
@pytest.mark.parametrize("value", ["whole", "", 1, None])
def test_invalid_stop_boundary_is_a_400_with_param(tiny_server, route, body, value) -> None:
    r = httpx.post(tiny_server.url + route, json={**body, "max_tokens": 2, "stop_boundary": value})
    assert r.status_code == 400 and r.json()["error"]["param"] == "stop_boundary"
    assert r.json()["error"]["type"] == "invalid_request_error"
    ok = httpx.post(tiny_server.url + route, json={**body, "max_tokens": 2, "stop_boundary": "word"})
    assert ok.status_code == 200


def test_word_boundary_does_not_cut_inside_a_word_and_streams_the_same(tiny_server) -> None:
    c = client(tiny_server)
    args = dict(model="tiny", prompt="Once upon a time", temperature=0, max_tokens=60)
    full = c.completions.create(**args).choices[0].text
    # a word prefix whose first occurrence is inside a longer word: prefix matching cuts there, word matching not
    stop = next((w[:-1] for w in re.findall(r"\w{3,}", full)
                 if not re.match(whole_word(w[:-1]), full[full.index(w[:-1]):])
                 and re.search(r"(?<!\w)" + re.escape(w[:-1]), full)), None)
    assert stop is not None, f"no word prefix to test with in {full!r}"
    first = re.search(whole_word(stop), full)
    expected = full if first is None else full[:first.start()]
    assert expected != full[:full.index(stop)]
    for boundary, want in (("word", expected), ("prefix", full[:full.index(stop)])):
        r = c.completions.create(**args, stop=[stop], extra_body={"stop_boundary": boundary}).choices[0]
        assert r.text == want, boundary
        stream = c.completions.create(**args, stop=[stop], stream=True, extra_body={"stop_boundary": boundary})
        assert "".join(ch.choices[0].text for ch in stream if ch.choices) == want


def test_auto_presets_report_their_choice_on_both_routes(tiny_server) -> None:
    c = client(tiny_server)
    chat = c.chat.completions.create(model="tiny", messages=[{"role": "system", "content": "Write code."}] + MSG,
                                     temperature=0, max_tokens=8, extra_body={"stop_presets": ["auto"]})
    assert "[auto -> json: mentions JSON]" in chat.choices[0].model_extra["termination"]["detail"]
    comp = c.completions.create(model="tiny", prompt="List three fruits.", temperature=0, max_tokens=8,
                                extra_body={"stop_presets": ["auto"]})
    assert "[auto -> paragraph: asks for a list]" in comp.choices[0].model_extra["termination"]["detail"]
    plain = c.completions.create(model="tiny", prompt="Tell me a story", temperature=0, max_tokens=4,
                                 extra_body={"stop_presets": ["auto"]})
    assert "[auto -> none: no structure asked for]" in plain.choices[0].model_extra["termination"]["detail"]


def test_auto_json_is_a_noop_under_a_grammar(tiny_server) -> None:
    r = client(tiny_server).chat.completions.create(
        model="tiny", messages=MSG, temperature=0, max_tokens=60, response_format={"type": "json_object"},
        extra_body={"stop_presets": ["auto"]})
    detail = r.choices[0].model_extra["termination"]["detail"]
    assert "auto -> json: mentions JSON (no-op under a grammar)" in detail
    assert r.choices[0].model_extra["termination"]["reason"] != "stop_string"
