"""The real server (tiny random-weight model) driven by the official openai client and raw httpx."""
from __future__ import annotations

import time

import httpx
import openai
import pytest

from haltwise.server.app import build_app
from tests.server.http_helpers import ServerThread, metric, sse_events, tiny_engine, wait_until

MSG = [{"role": "user", "content": "Say something."}]


def post(server, path: str, body: dict, **kw) -> httpx.Response:
    return httpx.post(server.url + path, json=body, timeout=60, **kw)


def client(server, key: str = "none") -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key=key, max_retries=0)


def test_completion_with_openai_client(tiny_server) -> None:
    r = client(tiny_server).completions.create(model="tiny", prompt="hello", max_tokens=8, temperature=0,
                                               extra_body={"ignore_eos": True})
    choice = r.choices[0]
    assert choice.finish_reason == "length" and r.usage.completion_tokens == 8
    assert r.usage.total_tokens == r.usage.prompt_tokens + 8
    t = choice.model_extra["termination"]
    assert t["reason"] == "max_tokens" and t["layer"] == "engine" and t["token_index"] == 7
    assert t["char_offset"] == len(choice.text) and choice.model_extra["stop_reason"] is None


def test_chat_stream_with_openai_client(tiny_server) -> None:
    c = client(tiny_server)
    full = c.chat.completions.create(model="tiny", messages=MSG, max_tokens=12, temperature=0)
    chunks = list(c.chat.completions.create(model="tiny", messages=MSG, max_tokens=12, temperature=0, stream=True,
                                            stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == full.usage.completion_tokens
    finals = [ch.choices[0] for ch in chunks[:-1] if ch.choices[0].finish_reason]
    assert len(finals) == 1 and finals[0].finish_reason == full.choices[0].finish_reason
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks[:-1])
    assert text == full.choices[0].message.content
    assert full.object == "chat.completion" and full.choices[0].message.role == "assistant"


def _stream_text(server, path: str, body: dict) -> tuple[str, dict]:
    with httpx.stream("POST", server.url + path, json={**body, "stream": True}, timeout=60) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = sse_events(r)
    assert events[-1] == "[DONE]"
    key = "delta" if "chat" in path else None
    text = "".join((e["choices"][0][key].get("content") or "") if key else e["choices"][0]["text"]
                   for e in events[:-1] if e["choices"])
    last = [e["choices"][0] for e in events[:-1] if e["choices"] and e["choices"][0]["finish_reason"]]
    assert len(last) == 1
    return text, last[0]


# The tiny random model loops under greedy decoding; a seeded sample gives varied text, same every time.
VARIED = {"max_tokens": 40, "temperature": 0.9, "seed": 7, "ignore_eos": True,
          "repetition_detection": {"enabled": False}}


@pytest.mark.parametrize("path, base", [
    ("/v1/completions", {"prompt": "The cat", **VARIED}),
    ("/v1/chat/completions", {"messages": MSG, **VARIED}),
])
def test_stream_equals_nonstream_with_and_without_stop(tiny_server, path: str, base: dict) -> None:
    def nonstream(body: dict) -> tuple[str, dict]:
        r = post(tiny_server, path, body)
        assert r.status_code == 200, r.text
        choice = r.json()["choices"][0]
        return (choice["message"]["content"] if "chat" in path else choice["text"]), choice

    text, choice = nonstream(base)
    assert _stream_text(tiny_server, path, base)[0] == text
    # a stop string taken from the middle of the unconstrained output must cut it exactly there
    stop = next(text[i:i + 2] for i in range(len(text) // 3, len(text) - 1) if text[i:i + 2].strip())
    cut = text.index(stop)
    for include in (False, True):
        body = {**base, "stop": [stop], "include_stop_str_in_output": include}
        stopped, choice = nonstream(body)
        assert stopped == text[:cut] + (stop if include else "")
        assert choice["finish_reason"] == "stop" and choice["stop_reason"] == stop
        assert choice["termination"]["reason"] == "stop_string"
        streamed, last = _stream_text(tiny_server, path, body)
        assert streamed == stopped and last["stop_reason"] == stop


def test_n_echo_and_several_prompts(tiny_server) -> None:
    r = post(tiny_server, "/v1/completions", {"prompt": ["ab", "cd"], "n": 2, "echo": True, "max_tokens": 3,
                                              "ignore_eos": True})
    choices = r.json()["choices"]
    assert [c["index"] for c in choices] == [0, 1, 2, 3]
    assert [c["text"][:2] for c in choices] == ["ab", "ab", "cd", "cd"]
    assert r.json()["usage"]["completion_tokens"] == 12
    with httpx.stream("POST", tiny_server.url + "/v1/completions", timeout=60,
                      json={"prompt": ["ab", "cd"], "n": 2, "echo": True, "max_tokens": 3, "ignore_eos": True,
                            "stream": True}) as s:
        events = sse_events(s)
    texts: dict[int, str] = {}
    for e in events[:-1]:
        for c in e["choices"]:
            texts[c["index"]] = texts.get(c["index"], "") + c["text"]
    assert sorted(texts) == [0, 1, 2, 3] and all(texts[i][:2] == ("ab" if i < 2 else "cd") for i in texts)


def test_logprobs_shapes(tiny_server) -> None:
    r = post(tiny_server, "/v1/completions", {"prompt": "x", "max_tokens": 4, "logprobs": 2, "ignore_eos": True})
    lp = r.json()["choices"][0]["logprobs"]
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == 4
    assert all(v <= 0 for v in lp["token_logprobs"])
    r = post(tiny_server, "/v1/chat/completions", {"messages": MSG, "max_tokens": 3, "logprobs": True,
                                                   "top_logprobs": 2, "ignore_eos": True})
    content = r.json()["choices"][0]["logprobs"]["content"]
    assert len(content) == 3 and all(len(c["top_logprobs"]) == 2 for c in content)


def _error(r: httpx.Response, status: int) -> dict:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    return body["error"]


COMPLETION = {"prompt": "hi", "max_tokens": 2}


@pytest.mark.parametrize("path, patch, param", [
    ("/v1/completions", {"max_tokens": 0}, "max_tokens"),
    ("/v1/completions", {"temperature": 2.5}, "temperature"),
    ("/v1/completions", {"temperature": -0.1}, "temperature"),
    ("/v1/completions", {"top_p": 0}, "top_p"),
    ("/v1/completions", {"top_p": 1.5}, "top_p"),
    ("/v1/completions", {"n": 0}, "n"),
    ("/v1/completions", {"max_tokens": "2"}, "max_tokens"),
    ("/v1/completions", {"stream": "yes"}, "stream"),
    ("/v1/completions", {"stop": ""}, "stop"),
    ("/v1/completions", {"stop": ["a", ""]}, "stop"),
    ("/v1/completions", {"stop": [f"s{i}" for i in range(65)]}, "stop"),
    ("/v1/completions", {"stop": ["x" * 300]}, "stop"),
    ("/v1/completions", {"prompt": [1, 2, 10**6]}, "prompt"),
    ("/v1/completions", {"prompt": [1, -3]}, "prompt"),
    ("/v1/completions", {"prompt": ""}, "prompt"),
    ("/v1/completions", {"stop_token_ids": [10**6]}, "stop_token_ids"),
    ("/v1/completions", {"frobnicate": True}, "frobnicate"),
    ("/v1/completions", {"logit_bias": {"1000000": 5}}, "logit_bias"),
    ("/v1/completions", {"logit_bias": {"x1": 5}}, "logit_bias"),
    ("/v1/completions", {"logit_bias": {"1": 250}}, "logit_bias"),
    ("/v1/chat/completions", {"messages": MSG, "logit_bias": {"1000000": 5}}, "logit_bias"),
    ("/v1/chat/completions", {"messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
    ("/v1/chat/completions", {"messages": []}, "messages"),
    ("/v1/chat/completions", {"messages": MSG, "tools": [{"type": "function"}]}, "tools[0].function"),
    ("/v1/chat/completions", {"messages": MSG, "tool_choice": "required"}, "tool_choice"),
    ("/v1/chat/completions", {"messages": MSG, "max_completion_tokens": 0}, "max_completion_tokens"),
])
def test_invalid_requests_are_400_with_param(tiny_server, path: str, patch: dict, param: str) -> None:
    body = {**COMPLETION, **patch} if "chat" not in path else {"max_tokens": 2, **patch}
    error = _error(post(tiny_server, path, body), 400)
    assert error["param"] == param and error["type"] == "invalid_request_error"


def test_unknown_field_message_names_it(tiny_server) -> None:
    error = _error(post(tiny_server, "/v1/completions", {**COMPLETION, "frobnicate": 1}), 400)
    assert "frobnicate" in error["message"]


def test_malformed_json_and_non_object(tiny_server) -> None:
    for raw in (b'{"prompt": "x",', b"\xff\xfe", b"[1, 2]", b""):
        r = httpx.post(tiny_server.url + "/v1/completions", content=raw, timeout=30,
                       headers={"content-type": "application/json"})
        _error(r, 400)


def test_context_length_exceeded_says_the_numbers(tiny_server) -> None:
    window = httpx.get(tiny_server.url + "/v1/models").json()["data"][0]["max_model_len"]
    error = _error(post(tiny_server, "/v1/completions", {"prompt": [5] * (window + 3), "max_tokens": 1}), 400)
    assert error["code"] == "context_length_exceeded" and str(window) in error["message"]
    assert str(window + 3) in error["message"]
    error = _error(post(tiny_server, "/v1/completions", {"prompt": [5] * 10, "max_tokens": window}), 400)
    assert error["code"] == "context_length_exceeded" and str(window + 10) in error["message"]


def test_truncate_prompt_tokens_is_reported(tiny_server) -> None:
    window = httpx.get(tiny_server.url + "/v1/models").json()["data"][0]["max_model_len"]
    r = post(tiny_server, "/v1/completions", {"prompt": [5] * (window + 3), "max_tokens": 2,
                                              "truncate_prompt_tokens": 10})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["prompt_tokens"] == 10
    assert r.json()["choices"][0]["truncated_prompt_tokens"] == window - 7


def test_unknown_model_is_404(tiny_server) -> None:
    error = _error(post(tiny_server, "/v1/completions", {**COMPLETION, "model": "gpt-9"}), 404)
    assert error["param"] == "model" and error["code"] == "model_not_found"
    with pytest.raises(openai.NotFoundError):
        client(tiny_server).completions.create(model="gpt-9", prompt="x", max_tokens=1)


def test_api_key_and_body_limit(keyed_server) -> None:
    _error(post(keyed_server, "/v1/completions", COMPLETION), 401)
    _error(post(keyed_server, "/v1/completions", COMPLETION, headers={"Authorization": "Bearer wrong"}), 401)
    _error(post(keyed_server, "/tokenize", {"prompt": "x"}), 401)
    with pytest.raises(openai.AuthenticationError):
        client(keyed_server, "nope").models.list()
    assert client(keyed_server, "s3cret").models.list().data[0].id == "tiny"
    ok = post(keyed_server, "/v1/completions", COMPLETION, headers={"Authorization": "Bearer s3cret"})
    assert ok.status_code == 200
    for path in ("/health", "/metrics"):
        assert httpx.get(keyed_server.url + path).status_code == 200
    big = {**COMPLETION, "prompt": "x" * 5000}
    error = _error(post(keyed_server, "/v1/completions", big, headers={"Authorization": "Bearer s3cret"}), 413)
    assert error["code"] == "request_too_large"


class _SlowRunner:
    """Wraps the model runner so every step takes >= 100 ms: a 240-token request needs >= 24 s."""

    def __init__(self, inner):
        self.inner = inner

    def execute(self, rows):
        time.sleep(0.1)
        return self.inner.execute(rows)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_stream_cut_by_client_is_counted_cancelled_once_and_frees_everything() -> None:
    engine = tiny_engine()
    engine.engine.runner = _SlowRunner(engine.engine.runner)
    with ServerThread(build_app(engine, "tiny")) as server:
        url = server.url
        labels = {"cancelled": dict(finish_reason="none", termination_reason="cancelled"),
                  "max_tokens": dict(finish_reason="length", termination_reason="max_tokens")}
        before = {k: metric(url, "haltwise_requests_finished_total", **v) for k, v in labels.items()}
        body = {"prompt": "a", "max_tokens": 240, "ignore_eos": True, "stream": True,
                "repetition_detection": {"enabled": False}}
        with httpx.stream("POST", url + "/v1/completions", json=body, timeout=60) as r:
            assert r.status_code == 200
            for i, _ in enumerate(r.iter_lines()):
                if i >= 6:
                    break
        started = time.monotonic()
        assert wait_until(lambda: metric(url, "haltwise_requests_running") == 0
                          and metric(url, "haltwise_kv_blocks_used") == 0, 15)
        assert time.monotonic() - started < 15  # freed by the cancel, not by finishing (>= 24 s of steps)
        after = {k: metric(url, "haltwise_requests_finished_total", **v) for k, v in labels.items()}
        assert after["cancelled"] - before["cancelled"] == 1 and after["max_tokens"] == before["max_tokens"]


def test_metrics_counters_move(tiny_server) -> None:
    url = tiny_server.url
    before = metric(url, "haltwise_requests_finished_total", finish_reason="length", termination_reason="max_tokens")
    tokens = metric(url, "haltwise_generation_tokens_total")
    rejected = metric(url, "haltwise_requests_rejected_total", reason="context_length_exceeded")
    post(tiny_server, "/v1/completions", {"prompt": "x", "max_tokens": 5, "ignore_eos": True})
    post(tiny_server, "/v1/completions", {"prompt": [1] * 5000, "max_tokens": 1})
    assert metric(url, "haltwise_requests_finished_total", finish_reason="length",
                  termination_reason="max_tokens") == before + 1
    assert metric(url, "haltwise_generation_tokens_total") == tokens + 5
    assert metric(url, "haltwise_requests_rejected_total", reason="context_length_exceeded") == rejected + 1
    assert metric(url, "haltwise_e2e_request_latency_seconds_count") >= 1
    assert metric(url, "haltwise_kv_blocks_total") > 0


def test_small_routes(tiny_server) -> None:
    url = tiny_server.url
    assert httpx.get(url + "/health").json() == {"status": "ok"}
    assert httpx.get(url + "/ready").status_code == 200
    tokens = httpx.post(url + "/tokenize", json={"prompt": "hello there"}).json()
    assert tokens["count"] == len(tokens["tokens"]) > 0
    text = httpx.post(url + "/detokenize", json={"tokens": tokens["tokens"]}).json()["prompt"]
    assert "hello there" in text
    _error(httpx.post(url + "/detokenize", json={"tokens": [10**7]}), 400)
    chat = httpx.post(url + "/tokenize", json={"messages": MSG}).json()
    assert chat["count"] > tokens["count"]
    paths = httpx.get(url + "/openapi.json").json()["paths"]
    assert {"/v1/completions", "/v1/chat/completions", "/tokenize", "/detokenize"} <= set(paths)
    _error(httpx.get(url + "/nope"), 404)


def test_chat_without_a_template_is_a_clear_400_and_completions_still_work() -> None:
    """A base model whose file has no chat template (Gemma 3 270M): chat is a 400 naming the fix."""
    from haltwise.server.app import build_app
    from tests.server.http_helpers import ServerThread, tiny_engine

    engine = tiny_engine()
    engine.tokenizer.chat_template = None  # as Tokenizer.from_gguf leaves it for such a file
    with ServerThread(build_app(engine, "tiny")) as server:
        error = _error(post(server, "/v1/chat/completions", {"messages": MSG, "max_tokens": 2}), 400)
        assert error["param"] == "messages" and "--chat-template FILE" in error["message"]
        assert "/v1/completions" in error["message"]
        error = _error(post(server, "/tokenize", {"messages": MSG}), 400)
        assert "no chat template" in error["message"]
        assert post(server, "/v1/completions", {"prompt": "Hi", "max_tokens": 2}).status_code == 200
        engine.tokenizer.set_chat_template("{% for m in messages %}{{ m['content'] }}\n{% endfor %}")
        r = post(server, "/v1/chat/completions", {"messages": MSG, "max_tokens": 2})
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["prompt_tokens"] == len(engine.tokenizer.encode("Say something.\n",
                                                                                  add_special_tokens=False))
