"""Prompt logprobs through the official openai client (tiny random model): the request lm-evaluation-harness
sends (echo + logprobs + max_tokens 0), the prompt logprob of a token equals the generated one, vLLM's
prompt_logprobs on completions and chat, and max_tokens 0 without echo stays a 400."""
from __future__ import annotations

import httpx
import openai
import pytest

from tests.server.http_helpers import sse_events

MSG = [{"role": "user", "content": "Say something."}]


def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)


def ids_of(server, text: str) -> list[int]:
    return httpx.post(server.url + "/tokenize", json={"prompt": text}).json()["tokens"]


def test_echo_logprobs_max_tokens_0_scores_the_prompt_like_generation(tiny_server) -> None:
    """The generated tokens are known ids (a +100 bias forces one; the reported logprobs are the model's own,
    before the bias), so the scored prompt is exactly prompt + generated ids."""
    c = client(tiny_server)
    prompt = ids_of(tiny_server, "The capital of France is")
    forced = ids_of(tiny_server, "hello")[0]
    gen = c.completions.create(model="tiny", prompt=prompt, max_tokens=6, temperature=0, logprobs=2,
                               logit_bias={str(forced): 100}, extra_body={"ignore_eos": True})
    generated = gen.choices[0].logprobs
    full = prompt + [forced] * 6
    scored = c.completions.create(model="tiny", prompt=full, max_tokens=0, echo=True, logprobs=2)
    choice = scored.choices[0]
    lp = choice.logprobs
    assert len(lp.tokens) == len(full) and lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert lp.tokens[len(prompt):] == generated.tokens
    assert lp.token_logprobs[len(prompt):] == pytest.approx(generated.token_logprobs, abs=1e-5)
    assert [list(t) for t in lp.top_logprobs[len(prompt):]] == [list(t) for t in generated.top_logprobs]
    assert lp.text_offset[0] == 0 and lp.text_offset == sorted(lp.text_offset)
    assert choice.finish_reason == "length" and scored.usage.completion_tokens == 0
    assert choice.text == httpx.post(tiny_server.url + "/detokenize", json={"tokens": full}).json()["prompt"]


def test_echo_logprobs_with_generation_prepends_the_prompt(tiny_server) -> None:
    c = client(tiny_server)
    prompt = "one two three"
    r = c.completions.create(model="tiny", prompt=prompt, max_tokens=3, echo=True, logprobs=1, temperature=0,
                             extra_body={"ignore_eos": True})
    lp = r.choices[0].logprobs
    n = len(ids_of(tiny_server, prompt))
    assert len(lp.tokens) == n + 3 and lp.token_logprobs[0] is None
    assert all(v is not None for v in lp.token_logprobs[1:])
    assert r.choices[0].text.startswith(prompt) and lp.text_offset[n] == len(prompt)
    # streamed: the first chunk carries the prompt's logprobs with the echo; all chunks together match
    with httpx.stream("POST", tiny_server.url + "/v1/completions", json={
            "prompt": prompt, "max_tokens": 3, "echo": True, "logprobs": 1, "temperature": 0, "ignore_eos": True,
            "stream": True}, timeout=60) as s:
        events = [e for e in sse_events(s) if e != "[DONE]"]
    tokens = [t for e in events for ch in e["choices"] if ch["logprobs"] for t in ch["logprobs"]["tokens"]]
    values = [v for e in events for ch in e["choices"] if ch["logprobs"] for v in ch["logprobs"]["token_logprobs"]]
    assert tokens == lp.tokens and values[0] is None and values[1:] == pytest.approx(lp.token_logprobs[1:])


def test_vllm_prompt_logprobs_on_completions_and_chat(tiny_server) -> None:
    c = client(tiny_server)
    prompt = ids_of(tiny_server, "a b c d e")
    r = c.completions.create(model="tiny", prompt=prompt, max_tokens=2, extra_body={"prompt_logprobs": 2})
    plp = r.choices[0].model_extra["prompt_logprobs"]
    assert len(plp) == len(prompt) and plp[0] is None
    for token, entry in zip(prompt[1:], plp[1:]):
        assert str(token) in entry and 2 <= len(entry) <= 3
        assert entry[str(token)]["rank"] >= 1 and entry[str(token)]["logprob"] <= 0
    chat = c.chat.completions.create(model="tiny", messages=MSG, max_tokens=2, extra_body={"prompt_logprobs": 0})
    plp = chat.model_extra["prompt_logprobs"]
    assert plp[0] is None and len(plp) == chat.usage.prompt_tokens
    assert all(len(e) == 1 for e in plp[1:])


@pytest.mark.parametrize("path, body", [
    ("/v1/completions", {"prompt": "x", "max_tokens": 0}),
    ("/v1/completions", {"prompt": "x", "max_tokens": 0, "echo": True}),
    ("/v1/completions", {"prompt": "x", "max_tokens": 0, "logprobs": 1}),
    ("/v1/chat/completions", {"messages": MSG, "max_tokens": 0, "prompt_logprobs": 1}),
    ("/v1/completions", {"prompt": "x", "prompt_logprobs": 21}),
])
def test_max_tokens_0_without_echo_and_logprobs_is_a_400(tiny_server, path: str, body: dict) -> None:
    r = httpx.post(tiny_server.url + path, json=body, timeout=30)
    assert r.status_code == 400
    assert r.json()["error"]["param"] in ("max_tokens", "prompt_logprobs")
