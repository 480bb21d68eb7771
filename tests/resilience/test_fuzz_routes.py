"""Bounded hypothesis-driven raw-HTTP fuzzing of every route: never a 5xx, never a hang.

tests/server/test_openapi_fuzz.py drives the two generation routes from their OpenAI schema; this
adds what a schema never generates: every route (right and wrong methods), raw bytes, malformed and
non-object JSON, odd content types and field values of every JSON type.
"""
from __future__ import annotations

from typing import Any, Iterator

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from haltwise.config import EngineConfig
from haltwise.server.app import build_app
from tests.server.http_helpers import ServerThread

MAX_EXAMPLES = 400  # ~0.07 s each on the tiny model
ROUTES = [("POST", "/v1/completions"), ("POST", "/v1/chat/completions"), ("GET", "/v1/models"),
          ("POST", "/tokenize"), ("POST", "/detokenize"), ("GET", "/health"), ("GET", "/ready"),
          ("GET", "/metrics")]
FIELDS = ["model", "prompt", "messages", "max_tokens", "temperature", "top_p", "top_k", "min_p", "n", "stream",
          "stop", "stop_token_ids", "seed", "logprobs", "top_logprobs", "echo", "timeout", "min_tokens",
          "ignore_eos", "include_stop_str_in_output", "truncate_prompt_tokens", "repetition_detection",
          "stream_options", "tokens", "add_special_tokens", "add_generation_prompt", "presence_penalty",
          "frequency_penalty", "repetition_penalty", "response_format", "max_completion_tokens", "unknown_field"]

scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**40, 2**40), st.integers(-3, 300),
                    st.floats(allow_nan=False, allow_infinity=False), st.floats(-1, 3), st.text(max_size=40),
                    st.sampled_from(["tiny", "", "<|im_end|>", "\ud7ff", "hello world", "user", "assistant"]))
json_values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                            st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                           max_leaves=12)
messages = st.lists(st.fixed_dictionaries({"role": st.sampled_from(["user", "system", "assistant", "tool", 1]),
                                           "content": st.one_of(st.text(max_size=30), json_values)}), max_size=3)
requests_ = st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=6)
plausible = st.fixed_dictionaries({"prompt": st.one_of(st.text(max_size=30), st.lists(st.integers(-5, 300), max_size=8))},
                                  optional={"model": st.just("tiny"), "messages": messages,
                                            "tokens": st.lists(st.integers(-5, 70000), max_size=8)}).flatmap(
    lambda base: requests_.map(lambda extra: {**base, **extra}))


def _encode(body: Any) -> bytes:
    import json

    return json.dumps(body, allow_nan=True).encode() if not isinstance(body, bytes) else body


text_prompt = st.text(max_size=30)
ids = st.lists(st.integers(0, 250), min_size=1, max_size=8)
chat_messages = st.lists(st.fixed_dictionaries({"role": st.sampled_from(["user", "system"]), "content": text_prompt}),
                         min_size=1, max_size=2)
gen_options = {"max_tokens": st.integers(1, 8), "temperature": st.floats(0, 2), "top_p": st.floats(0.01, 1),
               "stream": st.booleans(), "seed": st.integers(0, 2**31), "n": st.integers(1, 2),
               "ignore_eos": st.booleans(),
               "stop": st.one_of(st.text(min_size=1, max_size=4), st.lists(st.text(min_size=1, max_size=4), max_size=3))}
# per route: bodies that are valid or one field away from valid
VALID = {
    "/v1/completions": st.fixed_dictionaries({"model": st.just("tiny"), "prompt": st.one_of(text_prompt, ids)},
                                             optional=gen_options),
    "/v1/chat/completions": st.fixed_dictionaries({"model": st.just("tiny"), "messages": chat_messages},
                                                  optional=gen_options),
    "/tokenize": st.one_of(st.fixed_dictionaries({"prompt": text_prompt}, optional={"add_special_tokens": st.booleans()}),
                           st.fixed_dictionaries({"messages": chat_messages},
                                                 optional={"add_generation_prompt": st.booleans()})),
    "/detokenize": st.fixed_dictionaries({"tokens": st.lists(st.integers(0, 250), max_size=8)}),
}
bodies = st.one_of(st.none(), st.binary(max_size=64), json_values, requests_, plausible,
                   st.sampled_from([b"{", b'{"prompt": ', b"[]", b"null", b'{"prompt": NaN}', b"\xff\xfe{}"]))


def _bounded(body: Any, path: str) -> Any:
    """Keep generation short (validity unchanged): cap max_tokens and n, give a deadline."""
    if isinstance(body, dict) and path.startswith("/v1/"):
        body = dict(body)
        for key, cap in (("max_tokens", 8), ("n", 3), ("max_completion_tokens", 8)):
            if isinstance(body.get(key), int) and not isinstance(body[key], bool):
                body[key] = min(body[key], cap)
        body.setdefault("max_tokens", 8)
        body.setdefault("timeout", 5.0)
    return body


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    from haltwise.engine.async_engine import AsyncEngine

    engine = AsyncEngine.build(engine_config=EngineConfig(kv_cache_memory=8 * 2**20, max_model_len=256), tiny=True)
    with ServerThread(build_app(engine, "tiny", max_body_bytes=4096)) as s:
        yield s


def test_every_route_survives_hostile_input(server: ServerThread, record_property) -> None:
    seen: dict[str, list[int]] = {path: [] for _, path in ROUTES}
    client = httpx.Client(base_url=server.url, timeout=60)  # a hang fails the test as ReadTimeout

    @settings(max_examples=MAX_EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(route=st.sampled_from(ROUTES), wrong_method=st.booleans(), data=st.data(),
           content_type=st.sampled_from(["application/json"] * 4 + ["text/plain", None, "multipart/form-data"]))
    def check(route: tuple[str, str], wrong_method: bool, data: st.DataObject, content_type: str | None) -> None:
        method, path = route
        body = data.draw(st.one_of(bodies, VALID[path], VALID[path]) if path in VALID else bodies)
        if wrong_method:
            method = "GET" if method == "POST" else "POST"
        headers = {"content-type": content_type} if content_type else {}
        content = None if body is None else _encode(_bounded(body, path))
        r = client.request(method, path, content=content, headers=headers)
        seen[path].append(r.status_code)
        assert r.status_code < 500 or (r.status_code == 503 and path == "/ready"), (method, path, content, r.text)
        if r.status_code >= 400 and path != "/ready":
            assert set(r.json()["error"]) == {"message", "type", "param", "code"}, r.text

    try:
        check()
    finally:
        client.close()
    total = sum(len(v) for v in seen.values())
    record_property("fuzz_examples", total)
    print(f"\nfuzz: {total} requests over {len(ROUTES)} routes: "
          + ", ".join(f"{p} {len(v)} ({sorted(set(v))})" for p, v in seen.items()))
    assert total >= MAX_EXAMPLES and all(seen.values())
    assert any(200 in v for v in seen.values()) and any(400 in v for v in seen.values())
    assert httpx.get(f"{server.url}/health").status_code == 200
