"""The real server with the real SmolLM2-135M-Instruct: behaviour that a random model cannot show."""
from __future__ import annotations

import socket
from typing import Iterator

import httpx
import openai
import pytest

from haltwise.server.app import build_app
from tests.server.http_helpers import ServerThread, metric, sse_events, wait_until

pytestmark = pytest.mark.slow  # loading and dequantising the GGUF takes about a minute on 2 cores

SPECIAL = ("<|im_end|>", "<|im_start|>", "<|endoftext|>")


@pytest.fixture(scope="module")
def smol() -> Iterator[ServerThread]:
    from haltwise.engine.async_engine import AsyncEngine

    with ServerThread(build_app(AsyncEngine.build(), "SmolLM2-135M-Instruct")) as server:
        yield server


def test_chat_replies_have_no_special_tokens(smol) -> None:
    c = openai.OpenAI(base_url=smol.url + "/v1", api_key="x", max_retries=0)
    reasons = []
    for question in ("What is the capital of France?", "Say hello."):
        r = c.chat.completions.create(model="SmolLM2-135M-Instruct", temperature=0, max_tokens=60,
                                      messages=[{"role": "user", "content": question}])
        text = r.choices[0].message.content
        assert text and not any(s in text for s in SPECIAL)
        reason = r.choices[0].model_extra["termination"]["reason"]
        assert (r.choices[0].finish_reason, reason) in (("stop", "eos"), ("stop", "repetition"), ("length", "max_tokens"))
        reasons.append(reason)
        streamed = "".join(ch.choices[0].delta.content or "" for ch in c.chat.completions.create(
            model="SmolLM2-135M-Instruct", temperature=0, max_tokens=60, stream=True,
            messages=[{"role": "user", "content": question}]))
        assert streamed == text
    assert "eos" in reasons   # <|im_end|> was sampled at least once, so "no special tokens" was tested


def complete_both_ways(url: str, body: dict) -> dict:
    """The non-streamed choice; asserts the streamed deltas concatenate to the same text."""
    full = httpx.post(url + "/v1/completions", json=body, timeout=120).json()["choices"][0]
    with httpx.stream("POST", url + "/v1/completions", json={**body, "stream": True}, timeout=120) as r:
        events = sse_events(r)
    assert events[-1] == "[DONE]"
    assert "".join(e["choices"][0]["text"] for e in events[:-1]) == full["text"]
    return full


def test_stream_equals_nonstream_greedy_and_stops_cut_the_unstopped_text(smol) -> None:
    body = {"prompt": "The history of France begins", "max_tokens": 24, "temperature": 0}
    free = complete_both_ways(smol.url, body)
    text = free["text"]
    assert len(text) >= 12
    # Two stops taken from the unstopped text itself (so they occur whatever the host's kernels chose), the
    # later one listed first: the output is cut where the earliest occurrence starts, the stop not returned.
    late, early = text[2 * len(text) // 3:][:3], text[len(text) // 3:][:3]
    cut = min(text.find(late), text.find(early))
    stopped = complete_both_ways(smol.url, {**body, "stop": [late, early]})
    assert stopped["text"] == text[:cut] and stopped["finish_reason"] == "stop"
    assert stopped["stop_reason"] == (early if text.find(early) == cut else late)
    absent = complete_both_ways(smol.url, {**body, "stop": ["\u00a7\u00a7"]})   # not in the text: nothing changes
    assert (absent["text"], absent["finish_reason"]) == (text, free["finish_reason"]) and absent["stop_reason"] is None


def test_client_disconnect_aborts_nonstream_and_stream(smol) -> None:
    url = smol.url
    cancelled = metric(url, "haltwise_requests_finished_total", finish_reason="none", termination_reason="cancelled")
    # non-stream: send the request, then hang up before the (long) answer is ready
    body = b'{"prompt": "Once upon a time", "max_tokens": 2000, "ignore_eos": true}'
    port = int(url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        assert wait_until(lambda: metric(url, "haltwise_requests_running") == 1)
    assert wait_until(lambda: metric(url, "haltwise_requests_finished_total", finish_reason="none",
                                     termination_reason="cancelled") == cancelled + 1)
    # stream: read a few chunks, then close
    with httpx.stream("POST", url + "/v1/completions", timeout=120,
                      json={"prompt": "Once upon a time", "max_tokens": 2000, "ignore_eos": True, "stream": True}) as r:
        for i, _ in enumerate(r.iter_lines()):
            if i >= 6:
                break
    assert wait_until(lambda: metric(url, "haltwise_requests_finished_total", finish_reason="none",
                                     termination_reason="cancelled") == cancelled + 2)
    assert wait_until(lambda: metric(url, "haltwise_requests_running") == 0
                      and metric(url, "haltwise_kv_blocks_used") == 0)


def test_the_kv_pool_is_committed_whole_soon_after_start(smol) -> None:
    """The pool's pages commit in the background after ready (engine/pool_growth.py); an idle server
    takes them too, and free blocks are committed ones."""
    url = smol.url
    total = metric(url, "haltwise_kv_blocks_total")
    assert wait_until(lambda: metric(url, "haltwise_kv_blocks_committed") == total > 0, 60)
    assert metric(url, "haltwise_kv_blocks_free") == total - metric(url, "haltwise_kv_blocks_used")


def test_context_window_error_has_numbers(smol) -> None:
    r = httpx.post(smol.url + "/v1/completions", json={"prompt": [100] * 9000, "max_tokens": 1}, timeout=60)
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["code"] == "context_length_exceeded" and "8192" in error["message"] and "9000" in error["message"]
