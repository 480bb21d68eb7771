"""`haltwise serve --model qwen2.5-coder-0.5b` as a black box: a real server subprocess, the real openai client.

The checks SmolLM2 passes (test_http_smollm2.py, test_http_api.py), on a second vocabulary (151,936 ids,
byte-level BPE `qwen2`) and Qwen's own ChatML template (its default system prompt): stop strings cut
exactly and never leak, streaming equals non-streaming, `<|im_end|>` ends a reply (as eos, as a stop
string, as a stop token), invalid requests are OpenAI-shaped 400s naming the param and the server keeps
serving. One server for the module, float32 (the transformers-exact mode: no host-measured kernel plan,
which takes minutes to measure on a fresh 2-core machine; greedy output is the same on every host).
Generations are short (<= 16 tokens): a float32 0.5B decodes a few tokens per second on 2 cores.
"""
from __future__ import annotations

from typing import Iterator

import httpx
import openai
import pytest

from tests.models.real_models import real_model_path
from tests.server.browser_helpers import serve
from tests.server.http_helpers import sse_events

pytestmark = pytest.mark.slow  # loading the 0.5B GGUF in float32 takes about a minute on 2 cores

IM_END = 151645  # Qwen's <|im_end|> id
SPECIAL = ("<|im_end|>", "<|im_start|>", "<|endoftext|>")
QWEN_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
YES = [{"role": "user", "content": "Reply with only the word: yes"}]
CODE = "def fibonacci(n):"


@pytest.fixture(scope="module")
def qwen() -> Iterator[str]:
    real_model_path("qwen2.5-coder-0.5b")  # skips, naming the packages, where they are absent (`make models`)
    yield from serve("--model", "qwen2.5-coder-0.5b", "--dtype", "float32", "--max-model-len", "2048",
                     "--kv-cache-memory", "128MiB")


@pytest.fixture(scope="module")
def name(qwen: str) -> str:
    """The served model name, as a client learns it (GET /v1/models)."""
    return httpx.get(qwen + "/v1/models").json()["data"][0]["id"]


def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=300)


def complete(url: str, body: dict) -> dict:
    r = httpx.post(url + "/v1/completions", json={"temperature": 0, **body}, timeout=300)
    assert r.status_code == 200, r.text
    return r.json()


def stream_completion(url: str, body: dict) -> tuple[str, list[dict]]:
    """(concatenated text, the choices that carry a finish_reason) of a streamed completion."""
    with httpx.stream("POST", url + "/v1/completions", json={"temperature": 0, **body, "stream": True},
                      timeout=300) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = sse_events(r)
    assert events[-1] == "[DONE]"
    choices = [e["choices"][0] for e in events[:-1]]
    return "".join(c["text"] for c in choices), [c for c in choices if c["finish_reason"]]


def test_chat_uses_qwens_template_with_its_default_system_prompt(qwen, name) -> None:
    r = client(qwen).chat.completions.create(model=name, messages=YES, max_tokens=6, temperature=0)
    # the same conversation written out by hand in Qwen's ChatML, sent as a plain completion
    chatml = (f"<|im_start|>system\n{QWEN_SYSTEM}<|im_end|>\n<|im_start|>user\n{YES[0]['content']}<|im_end|>\n"
              "<|im_start|>assistant\n")
    plain = complete(qwen, {"prompt": chatml, "max_tokens": 6})
    assert r.usage.prompt_tokens == plain["usage"]["prompt_tokens"]
    assert r.choices[0].message.content == plain["choices"][0]["text"]
    assert r.choices[0].message.content.strip().lower().startswith("yes")


def test_im_end_ends_the_reply_as_eos_stop_string_and_stop_token(qwen, name) -> None:
    c = client(qwen)
    r = c.chat.completions.create(model=name, messages=YES, max_tokens=8, temperature=0)
    choice = r.choices[0]
    t = choice.model_extra["termination"]
    assert choice.finish_reason == "stop" and t["reason"] == "eos" and t["layer"] == "model"
    assert str(IM_END) in t["detail"] and choice.model_extra["stop_reason"] is None
    text = choice.message.content
    assert text and not any(s in text for s in SPECIAL) and t["char_offset"] == len(text)
    # with eos ignored, <|im_end|> still stops as a stop string (its special token) and as a stop token id
    for extra, reason, stop_reason in (({"stop": ["<|im_end|>"]}, "stop_string", "<|im_end|>"),
                                       ({"stop_token_ids": [IM_END]}, "stop_token", IM_END)):
        r = c.chat.completions.create(model=name, messages=YES, max_tokens=8, temperature=0,
                                      extra_body={"ignore_eos": True, **extra})
        got = r.choices[0]
        assert got.finish_reason == "stop" and got.model_extra["stop_reason"] == stop_reason
        assert got.model_extra["termination"]["reason"] == reason and got.message.content == text
    # ignoring eos without a stop: the text goes on past <|im_end|>, which never shows
    r = c.chat.completions.create(model=name, messages=YES, max_tokens=8, temperature=0,
                                  extra_body={"ignore_eos": True})
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 8
    longer = r.choices[0].message.content
    assert longer.startswith(text) and len(longer) > len(text) and not any(s in longer for s in SPECIAL)


def test_chat_stream_equals_nonstream(qwen, name) -> None:
    c = client(qwen)
    ask = {"model": name, "messages": [{"role": "user", "content": "Name one prime number."}],
           "max_tokens": 12, "temperature": 0}
    full = c.chat.completions.create(**ask)
    chunks = list(c.chat.completions.create(**ask, stream=True))
    assert chunks[0].choices[0].delta.role == "assistant"
    finals = [ch.choices[0].finish_reason for ch in chunks if ch.choices[0].finish_reason]
    assert finals == [full.choices[0].finish_reason]
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks) == full.choices[0].message.content


def test_stop_string_cuts_exactly_streams_the_same_and_never_leaks(qwen) -> None:
    base = {"prompt": CODE, "max_tokens": 16, "ignore_eos": True}
    text = complete(qwen, base)["choices"][0]["text"]
    streamed, last = stream_completion(qwen, base)
    assert streamed == text and [c["finish_reason"] for c in last] == ["length"]
    # a stop string from the middle of the free output (greedy: the same text up to it), across tokens
    stop = next(text[i:i + 3] for i in range(len(text) // 3, len(text) - 2) if text[i:i + 3].strip())
    cut = text.index(stop)
    for include in (False, True):
        body = {**base, "stop": ["never-generated", stop], "include_stop_str_in_output": include}
        choice = complete(qwen, body)["choices"][0]
        assert choice["text"] == text[:cut] + (stop if include else "")
        assert choice["finish_reason"] == "stop" and choice["stop_reason"] == stop
        t = choice["termination"]
        assert t["reason"] == "stop_string" and t["layer"] == "business" and t["char_offset"] == len(choice["text"])
        streamed, last = stream_completion(qwen, body)
        assert streamed == choice["text"] and [c["stop_reason"] for c in last] == [stop]


def _error(r: httpx.Response, status: int = 400) -> dict:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    return body["error"]


@pytest.mark.parametrize("patch, param", [
    ({"max_tokens": 0}, "max_tokens"),
    ({"temperature": 2.5}, "temperature"),
    ({"top_p": 0}, "top_p"),
    ({"stop": ["a", ""]}, "stop"),
    ({"prompt": [1, 151936]}, "prompt"),       # one past Qwen's vocabulary
    ({"stop_token_ids": [10**6]}, "stop_token_ids"),
    ({"frobnicate": True}, "frobnicate"),
])
def test_invalid_completion_is_400_with_param(qwen, patch, param) -> None:
    error = _error(httpx.post(qwen + "/v1/completions", json={"prompt": "hi", "max_tokens": 2, **patch}, timeout=60))
    assert error["param"] == param and error["type"] == "invalid_request_error"


def test_validation_through_the_client_and_the_server_keeps_serving(qwen, name) -> None:
    c = client(qwen)
    with pytest.raises(openai.BadRequestError) as bad:
        c.chat.completions.create(model=name, messages=YES, max_tokens=2, temperature=3)
    assert bad.value.status_code == 400 and bad.value.param == "temperature"
    with pytest.raises(openai.NotFoundError):
        c.completions.create(model="gpt-9", prompt="x", max_tokens=1)
    error = _error(httpx.post(qwen + "/v1/completions", json={"prompt": [5] * 2050, "max_tokens": 1}, timeout=60))
    assert error["code"] == "context_length_exceeded" and "2048" in error["message"] and "2050" in error["message"]
    _error(httpx.post(qwen + "/v1/completions", content=b'{"prompt": "x",', timeout=60,
                      headers={"content-type": "application/json"}))
    # still serving; an id valid for Qwen but past SmolLM2's 49,152 is a good prompt here
    assert httpx.get(qwen + "/ready").status_code == 200
    r = c.completions.create(model=name, prompt=[100_000, 100_001], max_tokens=1, temperature=0)
    assert r.usage.prompt_tokens == 2 and r.usage.completion_tokens == 1
