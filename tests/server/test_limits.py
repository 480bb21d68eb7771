"""Issue 27: per-request caps (server/limits.py) and schema bounds (structured/schema_shape.py) are 400s
that name the field, never a queue flood or a 500. Over a real uvicorn server with the tiny model."""
from __future__ import annotations

import httpx
import pytest

from haltwise.server.app import build_app
from tests.server.http_helpers import ServerThread, tiny_engine

ONE = {"max_tokens": 1, "ignore_eos": True}
CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}


def _param_error(r: httpx.Response, param: str, *words: str) -> dict:
    assert r.status_code == 400, (r.status_code, r.text[:300])
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["param"] == param, error
    assert all(w in error["message"] for w in words), error
    return error


def post(server: ServerThread, path: str, body: dict) -> httpx.Response:
    return httpx.post(server.url + path, json=body, timeout=120)


# ---- caps at their documented defaults -----------------------------------------------------------

def test_prompts_per_request_are_capped_at_64(tiny_server) -> None:
    _param_error(post(tiny_server, "/v1/completions", {**ONE, "prompt": ["a"] * 65}), "prompt", "64", "65")
    _param_error(post(tiny_server, "/v1/completions", {**ONE, "prompt": [[5]] * 65}), "prompt", "64")
    r = post(tiny_server, "/v1/completions", {**ONE, "prompt": ["a"] * 64})
    assert r.status_code == 200 and len(r.json()["choices"]) == 64


def test_n_times_prompts_is_capped_at_256_sequences(tiny_server) -> None:
    """The engine queues n x prompts sequences (max_queue 256): a larger request could only ever get 503s."""
    _param_error(post(tiny_server, "/v1/completions", {**ONE, "prompt": ["a"] * 3, "n": 128}), "n", "256", "128 x 3")
    r = post(tiny_server, "/v1/completions", {**ONE, "prompt": ["a"] * 2, "n": 128})
    assert r.status_code == 200 and len(r.json()["choices"]) == 256


def test_chat_messages_are_capped_at_1024(tiny_server) -> None:
    many = [{"role": "user", "content": "x"}] * 1025
    _param_error(post(tiny_server, "/v1/chat/completions", {**CHAT, "messages": many}), "messages", "1024", "1025")
    _param_error(post(tiny_server, "/tokenize", {"messages": many}), "messages", "1024")


def test_stop_token_ids_are_capped_at_64(tiny_server) -> None:
    body = {**ONE, "prompt": "a", "stop_token_ids": [1] * 65}
    _param_error(post(tiny_server, "/v1/completions", body), "stop_token_ids", "64", "65")
    assert post(tiny_server, "/v1/completions", {**body, "stop_token_ids": [1] * 64}).status_code == 200


def test_max_period_is_capped_at_256(tiny_server) -> None:
    """The loop check costs O(max_period) per token per sequence; 4096 used to be accepted."""
    body = {**CHAT, "repetition_detection": {"max_period": 4096}}
    _param_error(post(tiny_server, "/v1/chat/completions", body), "repetition_detection.max_period", "256", "4096")
    body["repetition_detection"]["max_period"] = 256
    assert post(tiny_server, "/v1/chat/completions", body).status_code == 200


def test_caps_are_configurable() -> None:
    from haltwise.server.limits import RequestCaps

    caps = RequestCaps(max_prompts=2, max_sequences=4)
    with ServerThread(build_app(tiny_engine(), "tiny", caps=caps, ui=False)) as server:
        _param_error(post(server, "/v1/completions", {**ONE, "prompt": ["a"] * 3}), "prompt", "2")
        _param_error(post(server, "/v1/completions", {**ONE, "prompt": ["a"] * 2, "n": 3}), "n", "4")
        assert post(server, "/v1/completions", {**ONE, "prompt": ["a"] * 2, "n": 2}).status_code == 200
    with pytest.raises(ValueError):
        RequestCaps(max_prompts=0)


# ---- deep and huge JSON schemas ---------------------------------------------------------------------

def _nested(depth: int, wrap) -> dict:
    schema: dict = {"type": "string"}
    for _ in range(depth):
        schema = wrap(schema)
    return schema


ITEMS = lambda s: {"type": "array", "items": s}                       # noqa: E731
PROPS = lambda s: {"type": "object", "properties": {"a": s}}          # noqa: E731
NOT = lambda s: {"not": s}                                            # noqa: E731 (an unsupported keyword)
ANY = lambda s: {"anyOf": [s]}                                        # noqa: E731


def _response_format(schema: dict) -> dict:
    root = {"type": "object", "properties": {"x": schema}}
    return {**CHAT, "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": root}}}


@pytest.mark.parametrize("wrap", [ITEMS, PROPS, NOT, ANY], ids=["items", "properties", "not", "anyOf"])
def test_a_300_level_schema_is_a_400_naming_response_format(tiny_server, wrap) -> None:
    """It used to reach jsonschema's recursive metaschema check first: RecursionError, HTTP 500."""
    r = post(tiny_server, "/v1/chat/completions", _response_format(_nested(300, wrap)))
    error = _param_error(r, "response_format.json_schema.schema", "nests deeper")
    assert error["type"] == "invalid_request_error"


@pytest.mark.parametrize("wrap", [ITEMS, PROPS, NOT, ANY], ids=["items", "properties", "not", "anyOf"])
def test_a_schema_just_within_the_depth_bound_never_overflows(tiny_server, wrap) -> None:
    """At the bound every recursive step after the shape check still fits the stack: a 200 or a 400
    (e.g. `not` is an unsupported keyword), never a 500."""
    from haltwise.structured.schema_shape import MAX_JSON_DEPTH, shape_problem

    def root(depth: int) -> dict:
        return _response_format(_nested(depth, wrap))["response_format"]["json_schema"]["schema"]

    depth = 1
    while shape_problem(root(depth + 1)) is None:
        depth += 1    # the deepest nesting of this shape that the bound lets through
    r = post(tiny_server, "/v1/chat/completions", _response_format(_nested(depth, wrap)))
    assert r.status_code in (200, 400) and f"deeper than {MAX_JSON_DEPTH}" not in r.text, r.text[:300]


def test_a_deep_schema_in_every_structured_field_is_a_400(tiny_server) -> None:
    """Also as JSON text (guided_json may be a string): 5000 levels, deeper than Python's json can load."""
    deep = {"type": "object", "properties": {"x": _nested(300, ITEMS)}}
    for field, value in [("guided_json", "[" * 5000 + "]" * 5000), ("guided_json", deep),
                         ("structured_outputs", {"json": deep})]:
        r = post(tiny_server, "/v1/completions", {**ONE, "prompt": "a", field: value})
        assert r.status_code == 400, (field, r.status_code, r.text[:300])
        assert r.json()["error"]["param"].startswith(field), r.text[:300]


def test_a_huge_flat_schema_is_a_400(tiny_server) -> None:
    wide = {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(12_000)}}
    r = post(tiny_server, "/v1/chat/completions", _response_format(wide))
    assert r.status_code in (400, 413), r.text[:300]
    if r.status_code == 400:
        assert r.json()["error"]["param"] == "response_format.json_schema.schema"
